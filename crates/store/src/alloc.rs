//! Item allocation. In order of cost: items this handle freed (no round trip), fresh
//! heap carved with one fetch-and-add on the shard's bump pointer, the shard's shared
//! free list (a tagged Treiber stack: two reads and a compare-and-swap), and last a
//! CLOCK eviction ([`crate::evict`]).
//!
//! A handle keeps up to [`LOCAL_CAP`](crate::free::LOCAL_CAP) freed items per shard and class for its own next
//! puts and returns the rest, and everything when dropped, to the shared lists. Items
//! held by a handle whose process dies are not returned (they show in
//! [`crate::StoreStats::free_or_held`]).

use farcache_kvformat::class;

use crate::free::{bump_addr, carved, pop, push};
use crate::store::Store;
use crate::{Result, StoreError};

impl Store {
    /// Gives `offset` back for reuse (this handle first, the shared list past its
    /// cap); `generation` is the shard generation the item was seen in.
    pub(crate) fn free_item(
        &self,
        shard: u32,
        class: u8,
        offset: u64,
        generation: u32,
    ) -> Result<()> {
        let spill = self
            .inner
            .free
            .lock()
            .give(shard, class, offset, generation);
        if let Some(spill) = spill {
            push(
                &self.inner.cache,
                &self.inner.layout,
                shard,
                class,
                &spill,
                generation,
            )?;
        }
        Ok(())
    }

    /// An item when the batched path found none: fresh heap if this handle has not
    /// seen the shard's heap carved out, the shared free list, else a CLOCK eviction.
    pub(crate) fn alloc_slow(&self, shard: u32, class: u8) -> Result<u64> {
        let lay = &self.inner.layout;
        let size = class::size(class).unwrap_or(u32::MAX);
        if !self.inner.free.lock().heap_exhausted(shard) {
            let old = self
                .inner
                .cache
                .fetch_add(bump_addr(lay, shard), u64::from(size))?;
            match carved(lay, old, size) {
                Some(o) => return Ok(o),
                None => self.inner.free.lock().mark_exhausted(shard),
            }
        }
        if let Some(o) = pop(&self.inner.cache, lay, shard, class)? {
            return Ok(o);
        }
        if let Some(o) = self.evict(shard, class)? {
            return Ok(o);
        }
        Err(StoreError::Full {
            shard,
            size: class::size(class).unwrap_or(0),
        })
    }
}
