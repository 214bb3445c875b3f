//! The life of a cache: create (with backups, from an SLO or a source file), open,
//! set its SLO, reshape, delete.
//!
//! Every change holds the cluster's `changes` lock end to end and commits the new
//! record before the old one stops being true: regions are placed on servers before
//! the commit (and freed again if anything fails), and regions are freed only after
//! the record that drops them is durable, so nothing leaks and no table names a
//! region no server holds.

use farcache_proto::control::{
    CacheInfo, ControlErrorCode, ControlRequest, ControlResponse, ServerState,
};
use farcache_proto::slo::Slo;
use farcache_proto::{CacheId, ServerId};

use super::Service;
use crate::catalogue::{CacheRecord, Catalogue};
use crate::cluster::{Target, file_slice};
use crate::config::REGION_ALIGN;
use crate::error::Reject;
use crate::placement;
use crate::store::Write;

/// Longest cache name, so names stay printable in status tables and logs.
pub const MAX_NAME_CHARS: usize = 128;
/// Most regions one cache may have; bounds the work (and memory) one request can cause.
pub const MAX_REGIONS: u64 = 1 << 20;

impl Service {
    pub(super) fn open(&self, name: &str) -> Result<CacheInfo, Reject> {
        let st = self.cluster.state.lock();
        let cache = st
            .catalogue
            .cache_by_name(name)
            .ok_or_else(|| Reject::not_found(name))?;
        Ok(st.catalogue.cache_info(cache))
    }

    pub(super) fn create(
        &self,
        name: String,
        capacity: u64,
        region_size: Option<u64>,
        replicas: u32,
        from_file: Option<String>,
        slo: Option<Slo>,
    ) -> Result<ControlResponse, Reject> {
        validate_name(&name)?;
        let region_size = region_size.unwrap_or(self.region_size);
        let n = region_count(capacity, region_size)?;
        let replicas = replicas.max(1).max(slo.as_ref().map_or(1, |s| s.replicas));
        if let Some(s) = &slo {
            s.validate().map_err(Reject::invalid)?;
        }
        if replicas > MAX_REPLICAS {
            return Err(Reject::invalid(format!(
                "at most {MAX_REPLICAS} copies of a region (asked for {replicas})"
            )));
        }
        if let Some(path) = &from_file {
            check_source_file(path, capacity)?;
        }
        let _changes = self.cluster.changes.lock();

        let (id, plan, backups, choice) = {
            let mut st = self.cluster.state.lock();
            if st.catalogue.cache_by_name(&name).is_some() {
                return Err(Reject::new(
                    ControlErrorCode::AlreadyExists,
                    format!("a cache named '{name}' already exists"),
                ));
            }
            let (plan, choice) = match &slo {
                None => (self.plan(&st.catalogue, n, region_size, &name)?, None),
                Some(slo) => {
                    let regions =
                        usize::try_from(n).map_err(|_| Reject::invalid("too many regions"))?;
                    let cands = crate::slo::candidates(&st.catalogue);
                    let p = self.slo.plan(slo, &cands, &[], regions, region_size)?;
                    (
                        self.cluster.targets(&st.catalogue, &p.servers),
                        Some(p.choice),
                    )
                }
            };
            let backups = if replicas > 1 {
                let owners: Vec<ServerId> = plan.iter().map(|t| t.server).collect();
                placement::place_backups(
                    &st.catalogue.candidates(),
                    &owners,
                    replicas as usize - 1,
                    region_size,
                )
                .map_err(|s| {
                    Reject::new(
                        ControlErrorCode::InsufficientMemory,
                        format!("cache '{name}' with {replicas} copies: {s}"),
                    )
                })?
            } else {
                Vec::new()
            };
            let id = st.catalogue.next_cache_id();
            // Persist the id before any server sees it, so it is never handed out twice.
            st.commit(&[Write::NextCacheId(id.saturating_add(1))])?;
            st.catalogue.take_cache_id();
            (id, plan, backups, choice)
        };

        let epoch = 1;
        let source = from_file.as_deref().map(|path| (path, capacity));
        let layout = Layout {
            region_size,
            capacity,
            epoch,
            from_file: from_file.as_deref(),
        };
        self.alloc_all(id, 0, &plan, &layout)?;
        // Backups: every copy on its own server, all zeros like the owner.
        let mut placed: Vec<(u32, Target)> = Vec::new();
        for (i, copies) in backups.iter().enumerate() {
            let targets = {
                let st = self.cluster.state.lock();
                self.cluster.targets(&st.catalogue, copies)
            };
            for t in targets {
                let region = i as u32;
                let req = ControlRequest::AllocRegion {
                    cache: id,
                    region,
                    region_size,
                    capacity,
                    epoch,
                    lost: false,
                    incoming: true,
                    load: source.map(|(path, cap)| file_slice(path, cap, region_size, region)),
                };
                if let Err(e) = self.cluster.links.call(t.server, &t.addr, &req) {
                    self.free_regions(id, 0, &plan);
                    self.free_backups(id, &placed);
                    return Err(Reject::unavailable(format!(
                        "server {} ({}) could not allocate a backup of region {region}: {e}",
                        t.server, t.addr
                    )));
                }
                placed.push((region, t));
            }
        }

        let record = CacheRecord {
            id,
            name,
            capacity,
            region_size,
            epoch,
            regions: plan.iter().map(|t| t.server).collect(),
            procs: Vec::new(),
            replicas,
            backups,
            from_file,
            slo: choice,
        };
        // Regions placed on servers, the cache not committed yet.
        fail::fail_point!("manager-before-create-commit");
        let mut st = self.cluster.state.lock();
        if let Err(e) = st.commit(&[Write::Cache(&record)]) {
            drop(st);
            self.free_regions(id, 0, &plan);
            self.free_backups(id, &placed);
            return Err(e);
        }
        // Insert first so the reply's server `used` figures include this cache.
        st.catalogue.insert_cache(record.clone());
        let info = st.catalogue.cache_info(&record);
        drop(st);
        self.cluster.push_routes(&info);
        tracing::info!(cache = id, name = %info.name, capacity, regions = n, replicas, servers = info.servers.len(), from_file = ?info.from_file, "cache created");
        Ok(ControlResponse::Created {
            tokens: self.tokens(id),
            cache: info,
        })
    }

    /// Gives a cache a new SLO: the search runs again over the servers holding it
    /// (their threads bound `s`; regions do not move).
    pub(super) fn set_slo(&self, name: &str, slo: Slo) -> Result<CacheInfo, Reject> {
        slo.validate().map_err(Reject::invalid)?;
        let _changes = self.cluster.changes.lock();
        let mut st = self.cluster.state.lock();
        let mut record = st
            .catalogue
            .cache_by_name(name)
            .ok_or_else(|| Reject::not_found(name))?
            .clone();
        let p = self.slo.plan(
            &slo,
            &crate::slo::candidates(&st.catalogue),
            &record.regions,
            0,
            record.region_size,
        )?;
        tracing::info!(cache = record.id, name, transport = %p.choice.transport, slo = %slo, "SLO set");
        record.slo = Some(p.choice);
        st.commit(&[Write::Cache(&record)])?;
        st.catalogue.insert_cache(record.clone());
        Ok(st.catalogue.cache_info(&record))
    }

    /// Changes a cache's capacity. Servers keeping regions learn the new capacity
    /// before the table commits (a grow makes the old last region accept bytes past
    /// the old end; a shrink stops serving, and zeroes, the bytes past the new end),
    /// new regions are placed first and cut ones freed last.
    pub(super) fn reshape(&self, name: &str, capacity: u64) -> Result<CacheInfo, Reject> {
        let _changes = self.cluster.changes.lock();
        let (mut record, grow, shrink, kept) = {
            let st = self.cluster.state.lock();
            let mut record = st
                .catalogue
                .cache_by_name(name)
                .ok_or_else(|| Reject::not_found(name))?
                .clone();
            if record.replicas > 1 || record.from_file.is_some() {
                return Err(Reject::invalid(format!(
                    "cache '{name}' has backups or was loaded from a file: reshaping such \
                     caches is not supported yet (create a new cache and copy)"
                )));
            }
            let n = region_count(capacity, record.region_size)? as usize;
            let old = record.regions.len();
            let grow = match &record.slo {
                // The search runs again: the cost changes, and new regions go to
                // servers with enough threads.
                Some(choice) => {
                    let p = self.slo.plan(
                        &choice.slo,
                        &crate::slo::candidates(&st.catalogue),
                        &record.regions[..old.min(n)],
                        n.saturating_sub(old),
                        record.region_size,
                    )?;
                    let grown = p.servers.get(old.min(n)..).unwrap_or_default().to_vec();
                    record.slo = Some(p.choice);
                    self.cluster.targets(&st.catalogue, &grown)
                }
                None if n > old => {
                    self.plan(&st.catalogue, (n - old) as u64, record.region_size, name)?
                }
                None => Vec::new(),
            };
            let shrink = self
                .cluster
                .targets(&st.catalogue, record.regions.get(n..).unwrap_or_default());
            let mut keep: Vec<ServerId> = record.regions[..old.min(n)].to_vec();
            keep.sort_unstable();
            keep.dedup();
            let kept = self.cluster.targets(&st.catalogue, &keep);
            (record, grow, shrink, kept)
        };

        let (old, old_cap) = (record.regions.len(), record.capacity);
        let epoch = record.epoch.saturating_add(1);
        let layout = Layout {
            region_size: record.region_size,
            capacity,
            epoch,
            from_file: None,
        };
        self.alloc_all(record.id, old, &grow, &layout)?;
        let undo = |why: Reject| {
            self.resize(record.id, &kept, old_cap, epoch, false).ok();
            self.free_regions(record.id, old, &grow);
            why
        };
        if !record.procs.is_empty() {
            self.cluster
                .load_procs(record.id, &grow, &record.procs)
                .map_err(undo)?;
        }
        self.resize(record.id, &kept, capacity, epoch, true)
            .map_err(undo)?;
        let keep = old - shrink.len();

        let previous = record.clone();
        record.regions.truncate(keep);
        record.regions.extend(grow.iter().map(|t| t.server));
        record.capacity = capacity;
        record.epoch = epoch;

        // Servers told the new capacity, the table not committed yet.
        fail::fail_point!("manager-before-reshape-commit");
        let mut st = self.cluster.state.lock();
        if let Err(e) = st.commit(&[Write::Cache(&record)]) {
            drop(st);
            return Err(undo(e));
        }
        // Insert first so the reply's server `used` figures include this cache.
        st.catalogue.insert_cache(record.clone());
        let info = st.catalogue.cache_info(&record);
        drop(st);
        // Free only once the new table is durable: until then the old one is authoritative.
        self.free_regions(previous.id, keep, &shrink);
        self.cluster.push_routes(&info);
        tracing::info!(
            cache = info.id,
            name,
            from = previous.capacity,
            to = capacity,
            regions = info.regions.len(),
            epoch = info.epoch,
            "cache reshaped"
        );
        Ok(info)
    }

    /// Tells every live server in `targets` the cache's capacity under `epoch`. With
    /// `required`, the first failure is returned; otherwise failures are logged.
    fn resize(
        &self,
        cache: CacheId,
        targets: &[Target],
        capacity: u64,
        epoch: u64,
        required: bool,
    ) -> Result<(), Reject> {
        let req = ControlRequest::ResizeCache {
            cache,
            capacity,
            epoch,
        };
        for t in targets {
            if !required {
                self.cluster.best_effort(t, &req, "restore capacity");
                continue;
            }
            if t.state == ServerState::Dead {
                continue;
            }
            if let Err(e) = self.cluster.links.call(t.server, &t.addr, &req) {
                return Err(Reject::unavailable(format!(
                    "server {} ({}) could not take the new capacity of cache {cache}: {e}",
                    t.server, t.addr
                )));
            }
        }
        Ok(())
    }

    pub(super) fn delete(&self, name: &str) -> Result<(), Reject> {
        let _changes = self.cluster.changes.lock();
        let (record, holders) = {
            let mut st = self.cluster.state.lock();
            let (record, holders) = self.cluster.cache_and_holders(&st.catalogue, name)?;
            st.commit(&[Write::RemoveCache(record.id)])?;
            st.catalogue.remove_cache(record.id);
            (record, holders)
        };
        // The catalogue no longer maps these regions, so failures only leak server memory.
        for t in &holders {
            let req = ControlRequest::DropCache { cache: record.id };
            self.cluster.best_effort(t, &req, "drop cache");
        }
        tracing::info!(cache = record.id, name, "cache deleted");
        Ok(())
    }

    /// Places `n` regions on alive servers, or explains what is missing.
    fn plan(
        &self,
        cat: &Catalogue,
        n: u64,
        region_size: u64,
        name: &str,
    ) -> Result<Vec<Target>, Reject> {
        let regions = usize::try_from(n).map_err(|_| Reject::invalid("too many regions"))?;
        let chosen = placement::place(&cat.candidates(), regions, region_size).map_err(|s| {
            // Just after a manager took over, servers it loaded have not registered
            // with it yet: their room is unknown, not missing.
            let waiting = cat.not_heard_from();
            if waiting > 0 {
                return Reject::unavailable(format!(
                    "cache '{name}': {waiting} server(s) have not reported to this manager \
                     yet (it took over or restarted moments ago); try again"
                ));
            }
            Reject::new(
                ControlErrorCode::InsufficientMemory,
                format!("cache '{name}': {n} region(s) of {region_size} bytes: {s}"),
            )
        })?;
        Ok(self.cluster.targets(cat, &chosen))
    }

    /// Asks each server to hold its region (`first` is the index of `plan[0]`); on any
    /// failure frees what was already placed so nothing leaks.
    fn alloc_all(
        &self,
        cache: CacheId,
        first: usize,
        plan: &[Target],
        layout: &Layout<'_>,
    ) -> Result<(), Reject> {
        let Layout {
            region_size,
            capacity,
            epoch,
            from_file,
        } = *layout;
        let source = from_file.map(|path| (path, capacity));
        for (i, t) in plan.iter().enumerate() {
            let index = first + i;
            let region = u32::try_from(index).map_err(|_| Reject::invalid("too many regions"))?;
            let req = ControlRequest::AllocRegion {
                cache,
                region,
                region_size,
                capacity,
                epoch,
                lost: false,
                incoming: false,
                load: source.map(|(path, cap)| file_slice(path, cap, region_size, region)),
            };
            if let Err(e) = self.cluster.links.call(t.server, &t.addr, &req) {
                tracing::warn!(cache, region, server = t.server, addr = %t.addr, error = %e, "region allocation failed, rolling back");
                self.free_regions(cache, first, &plan[..i]);
                return Err(Reject::unavailable(format!(
                    "server {} ({}) could not allocate region {region} of cache {cache}: {e}",
                    t.server, t.addr
                )));
            }
        }
        Ok(())
    }

    /// Frees `targets[i]` as region `first + i`, best effort.
    fn free_regions(&self, cache: CacheId, first: usize, targets: &[Target]) {
        for (i, t) in targets.iter().enumerate() {
            let Ok(region) = u32::try_from(first + i) else {
                return;
            };
            let req = ControlRequest::FreeRegion {
                cache,
                region,
                moved_to: None,
            };
            self.cluster.best_effort(t, &req, "free region");
        }
    }

    /// Frees backups placed by a create that failed, best effort.
    fn free_backups(&self, cache: CacheId, placed: &[(u32, Target)]) {
        for (region, t) in placed {
            let free = ControlRequest::FreeRegion {
                cache,
                region: *region,
                moved_to: None,
            };
            self.cluster.best_effort(t, &free, "free a backup");
        }
    }
}

/// What every region placed by one change shares.
#[derive(Clone, Copy)]
struct Layout<'a> {
    region_size: u64,
    capacity: u64,
    epoch: u64,
    /// The source file of a read-only cache.
    from_file: Option<&'a str>,
}

/// Most copies of a region a cache may ask for.
const MAX_REPLICAS: u32 = 8;

/// A cache loaded from a file holds exactly the file's bytes; servers read it from
/// their own file system (the manager checks what it can see, when it shares it).
fn check_source_file(path: &str, capacity: u64) -> Result<(), Reject> {
    if path.is_empty() || !std::path::Path::new(path).is_absolute() {
        return Err(Reject::invalid(format!(
            "the source file must be an absolute path (got '{path}')"
        )));
    }
    if let Ok(meta) = std::fs::metadata(path)
        && meta.len() < capacity
    {
        return Err(Reject::invalid(format!(
            "{path} has {} bytes, fewer than the capacity {capacity}",
            meta.len()
        )));
    }
    Ok(())
}

fn validate_name(name: &str) -> Result<(), Reject> {
    if name.is_empty() {
        return Err(Reject::invalid("cache name is empty"));
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(Reject::invalid(format!(
            "cache name has {chars} characters; at most {MAX_NAME_CHARS} are allowed"
        )));
    }
    Ok(())
}

/// Regions needed for `capacity` bytes, after checking both numbers.
fn region_count(capacity: u64, region_size: u64) -> Result<u64, Reject> {
    if capacity == 0 {
        return Err(Reject::invalid("capacity must be positive"));
    }
    if region_size == 0 || !region_size.is_multiple_of(REGION_ALIGN) {
        return Err(Reject::invalid(format!(
            "region size {region_size} must be a positive multiple of {REGION_ALIGN}"
        )));
    }
    let n = capacity.div_ceil(region_size);
    if n > MAX_REGIONS {
        return Err(Reject::invalid(format!(
            "capacity {capacity} needs {n} regions of {region_size} bytes; at most \
             {MAX_REGIONS} are allowed, use a larger region size"
        )));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name(&"é".repeat(MAX_NAME_CHARS)).is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_CHARS + 1)).is_err());
        assert_eq!(
            validate_name("").unwrap_err().code,
            ControlErrorCode::InvalidArgument
        );
    }

    #[test]
    fn region_counts_round_up_and_reject_bad_input() {
        assert_eq!(region_count(1, 4096).unwrap(), 1);
        assert_eq!(region_count(4096, 4096).unwrap(), 1);
        assert_eq!(region_count(4097, 4096).unwrap(), 2);
        assert!(region_count(0, 4096).is_err());
        assert!(region_count(10, 0).is_err());
        assert!(region_count(10, 1000).is_err());
        assert!(region_count(u64::MAX, 4096).is_err(), "too many regions");
    }
}
