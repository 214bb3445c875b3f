//! Manager restart with real processes: the manager is SIGKILLed and started again on
//! the same address and data directory. The catalogue (caches, region tables, epochs,
//! id counters) comes back from its store, data held by the servers stays readable
//! throughout, servers re-register, and both new and existing clients keep working.

mod common;

use std::time::Duration;

use common::{bin, diff, eventually, pattern, within};
use farcache_client::{CacheInfo, Client, ClientConfig, ClientError, OpError};
use farcache_proto::Status;
use farcache_proto::control::{ControlErrorCode, ServerState};
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 64 << 10;
const CALL_LIMIT: Duration = Duration::from_secs(30);

fn client(cluster: &ProcessCluster) -> Client {
    cluster
        .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(5)))
        .expect("client")
}

/// The parts of a cache's description the manager owns and must not change: id,
/// name, capacity, region size, epoch, region table, and the servers' ids and addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table(u32, String, u64, u64, u64, Vec<u32>, Vec<(u32, String)>);

fn table(info: &CacheInfo) -> Table {
    Table(
        info.id,
        info.name.clone(),
        info.capacity,
        info.region_size,
        info.epoch,
        info.regions.clone(),
        info.servers
            .iter()
            .map(|s| (s.id, s.addr.clone()))
            .collect(),
    )
}

fn assert_data(cache: &farcache_client::Cache, image: &[u8], what: &str) {
    let c = cache.clone();
    let len = image.len() as u64;
    let got = within(what, CALL_LIMIT, move || c.read(0, len))
        .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
    if let Some(d) = diff(&got, image) {
        panic!("{what}: {d}");
    }
}

fn wait_all_alive(client: &Client, servers: &[(u32, String)]) {
    eventually(
        "servers re-register with the restarted manager",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            let st = client.status().ok()?;
            let ok = servers.iter().all(|(id, addr)| {
                st.servers
                    .iter()
                    .any(|s| s.id == *id && s.addr == *addr && s.state == ServerState::Alive)
            });
            ok.then_some(())
        },
    );
}

#[test]
fn restarted_manager_keeps_catalogue_and_clients_keep_working() {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(16 << 20);
    let mut cluster = ProcessCluster::start(bin(), &opts).expect("start process cluster");
    let old_client = client(&cluster);

    let alpha = old_client.create("alpha", 5 * REGION + 100).unwrap();
    let beta = old_client
        .create_with_region_size("beta", 2 * REGION, Some(2 * REGION))
        .unwrap();
    // Grow beta so its epoch is past 1: the epoch must survive the restart too.
    beta.reshape(5 * REGION).unwrap();
    assert_eq!(beta.info().epoch, 2);
    assert_eq!(beta.info().regions.len(), 3);
    let alpha_img = pattern(1, alpha.capacity() as usize);
    let beta_img = pattern(2, beta.capacity() as usize);
    alpha.write(0, &alpha_img).unwrap();
    beta.write(0, &beta_img).unwrap();
    let alpha_before = table(&old_client.open("alpha").unwrap().info());
    let beta_before = table(&old_client.open("beta").unwrap().info());
    assert_eq!(alpha_before, table(&alpha.info()));
    let servers_before: Vec<(u32, String)> = old_client
        .status()
        .unwrap()
        .servers
        .iter()
        .map(|s| (s.id, s.addr.clone()))
        .collect();
    assert_eq!(servers_before.len(), 3);

    cluster.restart_manager().expect("restart manager");

    // Right away, before the servers have re-registered: the catalogue is back.
    let new_client = within("connect to the new manager", CALL_LIMIT, {
        let cfg = ClientConfig::new(cluster.manager_addr())
            .secret(cluster.secret().clone())
            .op_timeout(Duration::from_secs(5));
        move || Client::with_config(cfg)
    })
    .expect("new client");
    let alpha_new = new_client.open("alpha").unwrap();
    let beta_new = new_client.open("beta").unwrap();
    assert_eq!(
        table(&alpha_new.info()),
        alpha_before,
        "alpha after restart"
    );
    assert_eq!(table(&beta_new.info()), beta_before, "beta after restart");

    // The data path never involved the manager: old handles and new ones read the data.
    assert_data(&alpha, &alpha_img, "alpha, old handle");
    assert_data(&beta, &beta_img, "beta, old handle");
    assert_data(&alpha_new, &alpha_img, "alpha, new client");
    assert_data(&beta_new, &beta_img, "beta, new client");

    // The existing client's control calls reconnect to the new manager by themselves.
    let oc = old_client.clone();
    let reopened = within("old client open", CALL_LIMIT, move || oc.open("beta"))
        .expect("old client reconnects to the manager");
    assert_eq!(table(&reopened.info()), beta_before);
    assert_eq!(table(&alpha.refresh().unwrap()), alpha_before);

    wait_all_alive(&new_client, &servers_before);
    let st = old_client.status().unwrap();
    assert_eq!(st.servers.len(), 3, "no server registered twice: {st:?}");

    // New caches can be created (ids are not reused) and deleted, from both clients.
    let max_old_id = alpha_before.0.max(beta_before.0);
    let gamma = new_client.create("gamma", 3 * REGION).unwrap();
    assert!(gamma.id() > max_old_id, "cache id reused after restart");
    let gamma_img = pattern(3, (3 * REGION) as usize);
    gamma.write(0, &gamma_img).unwrap();
    assert_data(&gamma, &gamma_img, "gamma");
    let delta = old_client.create("delta", REGION).unwrap();
    assert!(delta.id() > gamma.id());
    delta.write(10, b"delta").unwrap();
    assert_eq!(&delta.read(10, 5).unwrap()[..], b"delta");
    match new_client.create("alpha", REGION) {
        Err(e) => assert_eq!(e.code(), Some(ControlErrorCode::AlreadyExists)),
        Ok(_) => panic!("alpha created twice"),
    }

    old_client.delete("alpha").unwrap();
    match new_client.open("alpha") {
        Err(e) => assert_eq!(e.code(), Some(ControlErrorCode::NotFound), "{e}"),
        Ok(_) => panic!("alpha still there after delete"),
    }
    // The servers dropped alpha's regions.
    let a = alpha.clone();
    match within("read deleted", CALL_LIMIT, move || a.read(0, 8)) {
        Err(ClientError::Op(OpError::Status(Status::NoSuchCache))) => {}
        other => panic!("read of a deleted cache: {other:?}"),
    }
    new_client.delete("gamma").unwrap();
    // The existing handle on an untouched cache keeps working for writes too.
    beta.write(REGION, b"after restart").unwrap();
    let mut beta_img = beta_img;
    beta_img[REGION as usize..REGION as usize + 13].copy_from_slice(b"after restart");
    assert_data(&beta_new, &beta_img, "beta written after restart");

    // A second restart sees the changes made after the first one.
    cluster.restart_manager().expect("second restart");
    let third = client(&cluster);
    let names: Vec<String> = third
        .status()
        .unwrap()
        .caches
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"beta".to_string()) && names.contains(&"delta".to_string()));
    assert_eq!(table(&third.open("beta").unwrap().info()), beta_before);
    assert_eq!(third.open("delta").unwrap().id(), delta.id());
    assert_data(&beta, &beta_img, "beta after the second restart");
    wait_all_alive(&third, &servers_before);
    let eps = third.create("epsilon", REGION).unwrap();
    assert!(eps.id() > delta.id(), "ids keep growing across restarts");
    assert!(
        old_client.status().is_ok(),
        "old client survives two restarts"
    );
}
