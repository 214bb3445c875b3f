//! Reshapes on a multi-process cluster with capacities that are not multiples of the
//! region size, checked byte for byte against a model: every byte up to a new capacity
//! is readable and writable on every server, a cut-off tail is unreachable, and a later
//! grow shows zeros there, never the old bytes. Also: a client follows the owner a
//! `wrong server` answer names, without asking the manager.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::{bin, diff, pattern};
use farcache_client::{ClientConfig, ClientError, OpError};
use farcache_proto::blocking::{control_call, handshake};
use farcache_proto::control::{ControlRequest, ControlResponse};
use farcache_proto::{Credential, Op, Role, Status};
use farcache_testkit::{ClusterOptions, ProcessCluster};
use rand::{Rng, SeedableRng};

const REGION: u64 = 64 << 10;

fn out_of_range(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Op(OpError::OutOfRange { .. } | OpError::Status(Status::OutOfRange))
    )
}

/// A cluster of `servers` and a client of it.
fn start(servers: usize) -> (ProcessCluster, farcache_client::Client) {
    let opts = ClusterOptions::default()
        .servers(servers)
        .region_size(REGION)
        .server_memory(16 << 20);
    let c = ProcessCluster::start(bin(), &opts).expect("cluster");
    let client = c
        .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(5)))
        .expect("client");
    (c, client)
}

#[test]
fn unaligned_reshapes_keep_every_byte_right() {
    let (_c, client) = start(3);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut cap = 2 * REGION + 1234;
    let cache = client.create("shape", cap).expect("create");
    let mut model = pattern(1, cap as usize);
    cache.write(0, &model).expect("fill");
    for step in 0..24u64 {
        // Alternate between growing and shrinking, mostly to unaligned sizes.
        let next = if step % 2 == 0 {
            cap + rng.gen_range(1..3 * REGION)
        } else {
            rng.gen_range(1..cap)
        }
        .min(8 * REGION - 3);
        let stale = client
            .open("shape")
            .expect("a handle opened before the reshape");
        client.reshape("shape", next).expect("reshape");
        let shrank = next < cap;
        model.resize(next as usize, 0);
        cache.refresh().expect("refresh");
        // The whole cache reads as the model: kept bytes kept, new bytes zero.
        let got = cache.read(0, next).expect("read all");
        if let Some(d) = diff(&got, &model) {
            panic!("step {step} ({cap} -> {next}): {d}");
        }
        if shrank {
            // The cut-off tail is unreachable, for a handle that knows and one that
            // does not (the servers refuse it, or the refreshed table does).
            let e = cache.read(next, 1).expect_err("past the end");
            assert!(out_of_range(&e), "step {step}: {e}");
            let tail = (cap - next).min(64);
            let e = stale
                .read(next, tail)
                .expect_err("stale handle past the end");
            assert!(out_of_range(&e), "step {step}: stale read: {e}");
        }
        // Write around the old end and up to the new one: every byte is writable.
        let from = cap.saturating_sub(100).min(next.saturating_sub(1));
        let fresh = pattern(step + 100, (next - from) as usize);
        cache.write(from, &fresh).expect("write up to the new end");
        model[from as usize..].copy_from_slice(&fresh);
        let back = cache.read(from, next - from).expect("read back");
        assert!(diff(&back, &fresh).is_none(), "step {step}: read back");
        cap = next;
    }
}

#[test]
fn clients_follow_the_owner_a_wrong_server_answer_names() {
    let (c, client) = start(2);
    let cache = client.create("moving", 2 * REGION).expect("create");
    cache.write(0, &[1u8; 64]).expect("write");
    let info = cache.info();
    let (from, to) = (info.regions[0], info.regions[1]);
    assert_ne!(from, to, "two regions on two servers");
    let addr_of = |id| info.server(id).expect("server").addr.clone();
    let (from_addr, to_addr) = (addr_of(from), addr_of(to));
    let cred = Credential::Cluster(c.secret().clone());
    let as_manager = |addr: &str| {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        handshake(&mut s, Role::Manager, 1, "", &cred).expect("handshake");
        s
    };
    // What a migration does (done here by hand, as the manager would): region 0 is
    // placed on the other server with new bytes, and its old holder forwards.
    let mut t = as_manager(&to_addr);
    let alloc = ControlRequest::AllocRegion {
        cache: info.id,
        region: 0,
        region_size: REGION,
        capacity: 2 * REGION,
        epoch: info.epoch + 1,
        lost: false,
        incoming: false,
        load: None,
    };
    assert_eq!(
        control_call(&mut t, &alloc).expect("alloc"),
        ControlResponse::Ok
    );
    let r = common::request(
        &mut t,
        1,
        &[Op::Write {
            cache: info.id,
            addr: 0,
            data: &[2u8; 64],
        }],
    );
    assert_eq!(r[0].1, Status::Ok);
    let mut f = as_manager(&from_addr);
    let free = ControlRequest::FreeRegion {
        cache: info.id,
        region: 0,
        moved_to: Some(to_addr.clone()),
    };
    assert_eq!(
        control_call(&mut f, &free).expect("free"),
        ControlResponse::Ok
    );

    // With the manager stopped, a refresh could not answer: the read is served by
    // following the old holder's hint.
    let manager = c.manager_pid().expect("manager pid");
    // SAFETY: stopping and resuming a child process this test started.
    unsafe { libc::kill(manager as libc::pid_t, libc::SIGSTOP) };
    let got = cache.read(0, 64);
    // SAFETY: as above.
    unsafe { libc::kill(manager as libc::pid_t, libc::SIGCONT) };
    assert_eq!(&got.expect("read through the hint")[..], &[2u8; 64][..]);
    assert_eq!(
        cache.info().regions[0],
        to,
        "the handle's table learned the move"
    );
}
