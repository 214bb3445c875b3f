//! Simulated caches of `u64` keys run on the `bench store-evict` trace: exact LRU,
//! textbook CLOCK, FIFO, and one of them per shard of the store.

use std::collections::HashMap;

/// A simulated cache of `u64` keys.
pub trait Policy {
    /// A lookup: true on a hit.
    fn get(&mut self, key: u64) -> bool;
    /// Inserts a key that missed, evicting as the policy says when full.
    fn insert(&mut self, key: u64);
    /// Items evicted so far.
    fn evictions(&self) -> u64;
}

/// Exact LRU over `u64` keys: a hash map into a slab of doubly linked nodes.
pub struct Lru {
    cap: usize,
    map: HashMap<u64, u32>,
    nodes: Vec<LruNode>,
    head: u32,
    tail: u32,
    pub evictions: u64,
}

const NIL: u32 = u32::MAX;

struct LruNode {
    key: u64,
    prev: u32,
    next: u32,
}

impl Lru {
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            map: HashMap::with_capacity(cap.max(1)),
            nodes: Vec::with_capacity(cap.max(1)),
            head: NIL,
            tail: NIL,
            evictions: 0,
        }
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        match p {
            NIL => self.head = n,
            p => self.nodes[p as usize].next = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.nodes[n as usize].prev = p,
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl Policy for Lru {
    /// The key becomes the most recent.
    fn get(&mut self, key: u64) -> bool {
        match self.map.get(&key).copied() {
            Some(i) => {
                self.unlink(i);
                self.push_front(i);
                true
            }
            None => false,
        }
    }

    /// The key goes in as the most recent; the least recent goes out when full.
    fn insert(&mut self, key: u64) {
        if self.get(key) {
            return;
        }
        let i = if self.nodes.len() < self.cap {
            self.nodes.push(LruNode {
                key,
                prev: NIL,
                next: NIL,
            });
            (self.nodes.len() - 1) as u32
        } else {
            let t = self.tail;
            self.unlink(t);
            self.map.remove(&self.nodes[t as usize].key);
            self.nodes[t as usize].key = key;
            self.evictions += 1;
            t
        };
        self.map.insert(key, i);
        self.push_front(i);
    }

    fn evictions(&self) -> u64 {
        self.evictions
    }
}

/// Textbook CLOCK (one hand, one reference bit, set by hits and clear on insert, as
/// the store's GET hits set its reference bytes).
pub struct Clock {
    cap: usize,
    map: HashMap<u64, usize>,
    keys: Vec<u64>,
    referenced: Vec<bool>,
    hand: usize,
    pub evictions: u64,
}

impl Clock {
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            map: HashMap::with_capacity(cap.max(1)),
            keys: Vec::with_capacity(cap.max(1)),
            referenced: Vec::with_capacity(cap.max(1)),
            hand: 0,
            evictions: 0,
        }
    }
}

impl Policy for Clock {
    fn get(&mut self, key: u64) -> bool {
        match self.map.get(&key) {
            Some(&i) => {
                self.referenced[i] = true;
                true
            }
            None => false,
        }
    }

    fn evictions(&self) -> u64 {
        self.evictions
    }

    fn insert(&mut self, key: u64) {
        if self.map.contains_key(&key) {
            return;
        }
        if self.keys.len() < self.cap {
            self.map.insert(key, self.keys.len());
            self.keys.push(key);
            self.referenced.push(false);
            return;
        }
        while self.referenced[self.hand] {
            self.referenced[self.hand] = false;
            self.hand = (self.hand + 1) % self.cap;
        }
        let i = self.hand;
        self.map.remove(&self.keys[i]);
        self.keys[i] = key;
        self.map.insert(key, i);
        self.evictions += 1;
        self.hand = (self.hand + 1) % self.cap;
    }
}

/// FIFO: CLOCK whose hits set no reference bit (what the store's CLOCK would be if
/// its reference bytes were never set).
pub struct Fifo(Clock);

impl Fifo {
    pub fn new(cap: usize) -> Self {
        Self(Clock::new(cap))
    }
}

impl Policy for Fifo {
    fn get(&mut self, key: u64) -> bool {
        self.0.map.contains_key(&key)
    }

    fn insert(&mut self, key: u64) {
        self.0.insert(key);
    }

    fn evictions(&self) -> u64 {
        self.0.evictions
    }
}

/// One policy per shard, keys going to their shard in the store (as the store's
/// CLOCK runs per shard, over the items of its own heap).
pub struct Sharded<P> {
    shard_of: Vec<u32>,
    parts: Vec<P>,
}

impl<P: Policy> Sharded<P> {
    /// `shard_of[key]` names each key's part.
    pub fn new(shard_of: Vec<u32>, parts: Vec<P>) -> Self {
        Self { shard_of, parts }
    }

    fn part(&mut self, key: u64) -> Option<&mut P> {
        let s = *self.shard_of.get(key as usize)? as usize;
        self.parts.get_mut(s)
    }
}

impl<P: Policy> Policy for Sharded<P> {
    fn get(&mut self, key: u64) -> bool {
        self.part(key).is_some_and(|p| p.get(key))
    }

    fn insert(&mut self, key: u64) {
        if let Some(p) = self.part(key) {
            p.insert(key);
        }
    }

    fn evictions(&self) -> u64 {
        self.parts.iter().map(Policy::evictions).sum()
    }
}

/// `cap` items cut into `parts` nearly equal capacities.
pub(super) fn split(cap: u64, parts: u64) -> impl Iterator<Item = usize> {
    let parts = parts.max(1);
    (0..parts).map(move |i| (cap / parts + u64::from(i < cap % parts)) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_least_recent() {
        let mut l = Lru::new(3);
        for k in [1, 2, 3] {
            l.insert(k);
        }
        assert!(l.get(1));
        l.insert(4); // evicts 2
        assert!(!l.get(2));
        assert!(l.get(3) && l.get(1) && l.get(4));
        l.insert(5); // evicts 3 (order now 5 4 1 3 → 3 least recent)
        assert!(!l.get(3));
        assert_eq!((l.len(), l.evictions), (3, 2));
    }

    #[test]
    fn clock_gives_referenced_keys_a_second_chance() {
        let mut c = Clock::new(3);
        for k in [1, 2, 3] {
            c.insert(k);
        }
        assert!(c.get(1));
        c.insert(4); // 1 is referenced: 2 goes
        assert!(c.get(1) && !c.get(2) && c.get(3) && c.get(4));
        assert_eq!(c.evictions, 1);
    }

    #[test]
    fn capacity_splits_evenly() {
        assert_eq!(split(10, 3).collect::<Vec<_>>(), vec![4, 3, 3]);
        assert_eq!(split(10, 3).sum::<usize>(), 10);
    }
}
