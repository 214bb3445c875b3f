//! Where an op's bytes are: the batch's view of the store (one snapshot), with what
//! refuses an op here (region elsewhere, lost bytes, a paused or fenced region).

use super::*;

pub(super) enum Miss<'m> {
    Status(Status),
    Wrong(Option<&'m str>),
}

/// Resolves `[addr, addr+len)` of `cache` to a region and offset on this server.
/// The range must lie within one region: clients split at region boundaries.
#[inline]
pub(super) fn locate<'m>(
    c: &'m CacheRegions,
    addr: u64,
    len: u64,
    me: &str,
) -> Result<(&'m Region, usize), Miss<'m>> {
    let end = addr
        .checked_add(len)
        .ok_or(Miss::Status(Status::OutOfRange))?;
    if end > c.capacity {
        return Err(Miss::Status(Status::OutOfRange));
    }
    let (idx, off) = region_split(addr, c.region_size);
    if off + len > c.region_size {
        return Err(Miss::Status(Status::OutOfRange));
    }
    match c.regions.get(idx as usize) {
        Some(Some(r)) => Ok((r, off as usize)),
        _ => Err(Miss::Wrong(c.hint(idx, me))),
    }
}

pub(super) struct Lookup<'m> {
    pub(super) map: &'m StoreMap,
    pub(super) me: &'m str,
    /// The owner a replication stream comes from.
    pub(super) replica_of: Option<&'m str>,
    /// Writes from a migration source may reach arriving regions (reads never do).
    pub(super) migration_writes: bool,
    pub(super) last: Option<(CacheId, &'m CacheRegions)>,
    pub(super) note_acks: bool,
}

impl<'m> Lookup<'m> {
    #[inline]
    pub(super) fn cache(&mut self, id: CacheId) -> Option<&'m CacheRegions> {
        if let Some((last, c)) = self.last
            && last == id
        {
            return Some(c);
        }
        let c = self.map.caches.get(&id)?;
        self.last = Some((id, c));
        Some(c)
    }

    // `lost`, `paused` and `wrote` test `guarded` here, in the op loop, before calling
    // out: most caches have no region being lost, moved or backed up.

    /// Whether bytes of `[addr, addr+len)` in the cache `find` last resolved are lost.
    #[inline]
    pub(super) fn lost(&self, addr: u64, len: u64) -> bool {
        self.last
            .is_some_and(|(_, c)| c.guarded && c.lost_in(addr, len))
    }

    /// A replicated write from a server that is not the region's owner in this
    /// server's table: `WRONG_SERVER` when this server owns it now (the writer is a
    /// stale owner: a failover came first), `PAUSED` when the table names a third
    /// server (it may lag behind a move; the owner sends again shortly). Caches
    /// without a table yet take the write. (A migration's copy is no replication
    /// stream: it fills arriving regions unchecked.)
    #[inline]
    pub(super) fn fenced(&self, addr: u64) -> Option<Status> {
        let writer = self.replica_of?;
        let (_, c) = self.last?;
        let idx = region_split(addr, c.region_size).0 as usize;
        match c.owners.get(idx).map(String::as_str) {
            None | Some("") => None,
            Some(o) if o == writer => None,
            Some(o) if o == self.me => Some(Status::WrongServer),
            Some(_) => Some(Status::Paused),
        }
    }

    /// Whether a write of `[addr, addr+len)` is refused for now with `PAUSED`: its
    /// region is being handed off, or copied away and throttled.
    #[inline]
    pub(super) fn paused(&self, addr: u64, len: u64) -> bool {
        self.last.is_some_and(|(_, c)| {
            c.guarded && (c.write_paused(addr) || c.write_throttled(addr, len))
        })
    }

    /// After a write: tells the region (migration, lost bytes) and, if the region
    /// has backups, notes the range for them.
    #[inline(always)]
    pub(super) fn wrote(&self, addr: u64, len: u64, overwrote: bool, written: &mut Vec<Written>) {
        if self.last.is_some_and(|(_, c)| c.guarded) {
            self.wrote_guarded(addr, len, overwrote, written);
        }
    }

    /// Notes the region `addr` is in (of the cache `find` last resolved) as written.
    #[inline(always)]
    pub(super) fn touch(&self, touched: &mut Touched<'m>, addr: u64, r: &'m Region) {
        if self.note_acks
            && let Some((cache, c)) = self.last
        {
            touched.note(cache, region_split(addr, c.region_size).0, r);
        }
    }

    #[inline(never)]
    pub(super) fn wrote_guarded(
        &self,
        addr: u64,
        len: u64,
        overwrote: bool,
        written: &mut Vec<Written>,
    ) {
        if let Some((cache, c)) = self.last {
            c.wrote(addr, len, overwrote);
            if c.backups_at(addr).is_some() {
                written.push(Written {
                    cache,
                    addr,
                    len: len as u32,
                    tag: None,
                    answer: None,
                });
            }
        }
    }

    /// Whether the cache `find` last resolved refuses writes from this connection.
    #[inline]
    pub(super) fn read_only(&self) -> bool {
        !self.migration_writes && self.last.is_some_and(|(_, c)| c.read_only)
    }

    #[inline(always)]
    pub(super) fn find(
        &mut self,
        cache: CacheId,
        addr: u64,
        len: u64,
    ) -> Result<(&'m Region, usize), Miss<'m>> {
        let c = self.cache(cache).ok_or(Miss::Status(Status::NoSuchCache))?;
        let found = locate(c, addr, len, self.me)?;
        if c.arriving(addr) && !self.migration_writes {
            // Not this server's yet: whoever asked goes to the owner it knows.
            let idx = region_split(addr, c.region_size).0;
            return Err(Miss::Wrong(c.hint(idx, self.me)));
        }
        Ok(found)
    }
}
