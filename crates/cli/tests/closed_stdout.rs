//! A command whose stdout reader went away (`farcache status | head`) exits quietly
//! with status 0 instead of panicking on the broken pipe.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{bin, eventually};
use farcache_testkit::{ClusterOptions, ProcessCluster};

/// Runs `farcache args` with a stdout pipe whose read end is closed before the
/// command writes, and returns its exit status and stderr.
fn run_into_closed_pipe(args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(bin())
        .args(args)
        .env("FARCACHE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn farcache");
    drop(child.stdout.take());
    let mut stderr = child.stderr.take().expect("stderr piped");
    let status = eventually(
        &format!("farcache {args:?} exits"),
        Duration::from_secs(60),
        Duration::from_millis(20),
        || child.try_wait().expect("try_wait"),
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err).expect("read stderr");
    (status, err)
}

#[test]
fn printing_commands_exit_quietly_when_stdout_is_closed() {
    let cluster = ProcessCluster::start(bin(), &ClusterOptions::default().servers(1))
        .expect("start process cluster");
    let secret = cluster.secret_path();
    let secret = secret.to_str().expect("utf-8 temp path");
    let manager = cluster.manager_addr();
    let dir = tempfile::tempdir().expect("tempdir");
    let new_secret = dir.path().join("new.secret");
    let new_secret = new_secret.to_str().expect("utf-8 temp path");

    let commands: [&[&str]; 4] = [
        &["status", "--manager", manager, "--secret-file", secret],
        &[
            "create",
            "--manager",
            manager,
            "--secret-file",
            secret,
            "c",
            "--capacity",
            "1MiB",
            "--region-size",
            "64KiB",
        ],
        &[
            "token",
            "--manager",
            manager,
            "--secret-file",
            secret,
            "--cache",
            "c",
        ],
        &["secret", "--out", new_secret],
    ];
    for args in commands {
        let (status, err) = run_into_closed_pipe(args);
        assert!(
            status.success() && !err.contains("panicked"),
            "farcache {args:?} into a closed pipe: {status}\nstderr:\n{err}"
        );
    }
    // The commands did their work; only the telling was cut short.
    assert!(std::path::Path::new(new_secret).exists());
    let client = cluster.client().expect("client");
    client.open("c").expect("cache c was created");
}
