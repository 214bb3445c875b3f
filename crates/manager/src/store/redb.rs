//! The embedded catalogue: a redb file, one write transaction per change. The default
//! for one machine (`farcache up`, `demo`, tests).
//!
//! Records are JSON so the file stays readable with generic tools and fields can be
//! added without a migration.

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};

use super::{Backend, Loaded, Write, decode, encode};
use crate::error::ManagerError;

const SERVERS: TableDefinition<u32, &[u8]> = TableDefinition::new("servers");
const CACHES: TableDefinition<u32, &[u8]> = TableDefinition::new("caches");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const NEXT_SERVER_ID: &str = "next_server_id";
const NEXT_CACHE_ID: &str = "next_cache_id";

pub struct RedbStore {
    db: Database,
}

impl RedbStore {
    /// Opens (or creates) the file and reads it whole. redb locks the file, so a second
    /// manager on the same directory fails here instead of corrupting state.
    pub fn open(path: &Path) -> Result<(Self, Loaded), ManagerError> {
        let db = Database::create(path)?;
        let store = Self { db };
        // Create the tables up front so reads never meet a missing table.
        store.apply(&[])?;
        let loaded = store.load()?;
        Ok((store, loaded))
    }

    fn load(&self) -> Result<Loaded, ManagerError> {
        let txn = self.db.begin_read()?;
        let mut loaded = Loaded::default();
        let servers = txn.open_table(SERVERS)?;
        for row in servers.iter()? {
            let (k, v) = row?;
            loaded
                .servers
                .push(decode(&format!("server {}", k.value()), v.value())?);
        }
        let caches = txn.open_table(CACHES)?;
        for row in caches.iter()? {
            let (k, v) = row?;
            loaded
                .caches
                .push(decode(&format!("cache {}", k.value()), v.value())?);
        }
        let meta = txn.open_table(META)?;
        let get = |key: &str| -> Result<u32, ManagerError> {
            let v = meta.get(key)?.map_or(0, |g| g.value());
            u32::try_from(v).map_err(|_| ManagerError::Corrupt(format!("{key} = {v}")))
        };
        loaded.next_server_id = get(NEXT_SERVER_ID)?;
        loaded.next_cache_id = get(NEXT_CACHE_ID)?;
        let events = txn.open_table(EVENTS)?;
        for row in events.iter()? {
            let (k, v) = row?;
            let seq = k.value();
            loaded
                .events
                .push((seq, decode(&format!("event {seq}"), v.value())?));
        }
        Ok(loaded)
    }

    /// Applies `writes` in one durable transaction: all or nothing.
    fn apply(&self, writes: &[Write<'_>]) -> Result<(), ManagerError> {
        let txn = self.db.begin_write()?;
        {
            let mut servers = txn.open_table(SERVERS)?;
            let mut caches = txn.open_table(CACHES)?;
            let mut meta = txn.open_table(META)?;
            let mut events = txn.open_table(EVENTS)?;
            for w in writes {
                match *w {
                    Write::Server(s) => {
                        servers.insert(s.id, encode(s)?.as_slice())?;
                    }
                    Write::Cache(c) => {
                        caches.insert(c.id, encode(c)?.as_slice())?;
                    }
                    Write::RemoveCache(id) => {
                        caches.remove(id)?;
                    }
                    Write::NextServerId(id) => {
                        meta.insert(NEXT_SERVER_ID, u64::from(id))?;
                    }
                    Write::NextCacheId(id) => {
                        meta.insert(NEXT_CACHE_ID, u64::from(id))?;
                    }
                    Write::Event(seq, e) => {
                        events.insert(seq, encode(e)?.as_slice())?;
                    }
                    Write::DropEvent(seq) => {
                        events.remove(seq)?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }
}

impl Backend for RedbStore {
    fn commit(&self, writes: &[Write<'_>]) -> Result<(), ManagerError> {
        self.apply(writes)
    }

    fn name(&self) -> &'static str {
        "redb"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{CacheRecord, ServerRecord};
    use farcache_proto::control::PriceClass;

    #[test]
    fn writes_survive_reopen_and_the_file_is_locked_while_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manager.redb");
        let server = ServerRecord {
            id: 3,
            addr: "127.0.0.1:1".into(),
            memory: 1 << 30,
            cores: 2,
            threads: 1,
            price_class: PriceClass::Spot,
            price_per_gib_hour: 0.25,
            tls_addr: Some("127.0.0.1:2".into()),
            reclaim: None,
        };
        let cache = |id, name: &str| CacheRecord {
            id,
            name: name.into(),
            capacity: 10,
            region_size: 4096,
            epoch: 2,
            regions: vec![3],
            procs: Vec::new(),
            replicas: 2,
            backups: vec![vec![4]],
            from_file: None,
            slo: None,
        };
        let (a, b) = (cache(1, "a"), cache(2, "b"));
        {
            let (store, loaded) = RedbStore::open(&path).unwrap();
            assert!(loaded.servers.is_empty() && loaded.caches.is_empty());
            assert_eq!(loaded.next_server_id, 0);
            store
                .commit(&[
                    Write::Server(&server),
                    Write::Cache(&a),
                    Write::Cache(&b),
                    Write::NextServerId(4),
                    Write::NextCacheId(3),
                ])
                .unwrap();
            store.commit(&[Write::RemoveCache(1)]).unwrap();
            let lost = |region| {
                crate::events::Event::Lost(farcache_proto::control::LostRegion {
                    cache: 2,
                    region,
                    was_on: 3,
                    now_on: 4,
                    reason: "killed".into(),
                    reloaded: false,
                })
            };
            let (e0, e1) = (lost(0), lost(1));
            store
                .commit(&[Write::Event(0, &e0), Write::Event(1, &e1)])
                .unwrap();
            store.commit(&[Write::DropEvent(0)]).unwrap();
            assert!(
                RedbStore::open(&path).is_err(),
                "second opener must be refused"
            );
        }
        let (_store, loaded) = RedbStore::open(&path).unwrap();
        assert_eq!(loaded.servers, vec![server]);
        assert_eq!(loaded.caches, vec![b]);
        assert_eq!((loaded.next_server_id, loaded.next_cache_id), (4, 3));
        assert_eq!(loaded.events.len(), 1, "event 0 was dropped");
        assert_eq!(loaded.events[0].0, 1);
    }
}
