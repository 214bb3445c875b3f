//! A map keyed by server id without SipHash: ids are small manager-assigned integers
//! and the map is consulted once per op on the hot path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use farcache_proto::ServerId;

#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // Spread the id over the high bits hashbrown uses for control bytes.
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b) ^ (self.0 >> 56);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

pub(crate) type IdMap<V> = HashMap<ServerId, V, BuildHasherDefault<IdHasher>>;

/// Connections by server id: a compact list (cheap to walk on every flush) plus an
/// id → position index. Manager-assigned ids are small and dense, so the index is a
/// vector (one bounds check per op instead of a hash probe); ids past [`DENSE_IDS`] use
/// a map.
pub(crate) struct ConnTable<T> {
    items: Vec<(ServerId, T)>,
    /// Position + 1 in `items`, 0 = absent.
    dense: Vec<u32>,
    sparse: IdMap<u32>,
}

const DENSE_IDS: usize = 1 << 16;

impl<T> Default for ConnTable<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            dense: Vec::new(),
            sparse: IdMap::default(),
        }
    }
}

impl<T> ConnTable<T> {
    #[inline]
    fn pos(&self, id: ServerId) -> Option<usize> {
        let p = if (id as usize) < DENSE_IDS {
            *self.dense.get(id as usize)?
        } else {
            *self.sparse.get(&id)?
        };
        (p as usize).checked_sub(1)
    }

    fn set_pos(&mut self, id: ServerId, p: u32) {
        let i = id as usize;
        if i < DENSE_IDS {
            if self.dense.len() <= i {
                self.dense.resize(i + 1, 0);
            }
            self.dense[i] = p;
        } else if p == 0 {
            self.sparse.remove(&id);
        } else {
            self.sparse.insert(id, p);
        }
    }

    #[inline]
    pub fn get(&self, id: &ServerId) -> Option<&T> {
        self.pos(*id).map(|p| &self.items[p].1)
    }

    #[inline]
    pub fn get_mut(&mut self, id: &ServerId) -> Option<&mut T> {
        self.pos(*id).map(|p| &mut self.items[p].1)
    }

    pub fn insert(&mut self, id: ServerId, v: T) {
        match self.pos(id) {
            Some(p) => self.items[p].1 = v,
            None => {
                self.items.push((id, v));
                self.set_pos(id, self.items.len() as u32);
            }
        }
    }

    pub fn remove(&mut self, id: &ServerId) -> Option<T> {
        let p = self.pos(*id)?;
        self.set_pos(*id, 0);
        let (_, v) = self.items.swap_remove(p);
        if let Some((moved, _)) = self.items.get(p) {
            let moved = *moved;
            self.set_pos(moved, p as u32 + 1);
        }
        Some(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (ServerId, &T)> {
        self.items.iter().map(|(k, v)| (*k, v))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (ServerId, &mut T)> {
        self.items.iter_mut().map(|(k, v)| (*k, v))
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_table_behaves_like_a_map() {
        let mut t = ConnTable::default();
        let mut model = std::collections::BTreeMap::new();
        let ids = [1u32, 7, 3, 70_000, 2, 1 << 20, 5];
        for (n, &id) in ids.iter().enumerate() {
            t.insert(id, n);
            model.insert(id, n);
        }
        t.insert(7, 99);
        model.insert(7, 99);
        for id in [3u32, 70_000, 1, 42] {
            assert_eq!(t.remove(&id), model.remove(&id));
        }
        for id in 0..8u32 {
            assert_eq!(t.get(&id), model.get(&id));
        }
        assert_eq!(t.get(&(1 << 20)), model.get(&(1 << 20)));
        let mut all: Vec<(u32, usize)> = t.iter().map(|(k, v)| (k, *v)).collect();
        all.sort_unstable();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        if let Some(v) = t.get_mut(&5) {
            *v = 1234;
        }
        assert_eq!(t.values().copied().max(), Some(1234));
    }
}
