//! The parts one frame carries, in op order. A batch's ops usually go out as long
//! runs of whole one-region ops of one ticket, so a run is kept as one entry (key,
//! first op, count) rather than one [`PartRef`] per op: appending an op costs a
//! counter, and completing a run looks its ticket up once. Parts that are not whole
//! ops (a piece of a split op, a redirected or paused part) stay single entries.

use crate::op::{Kind, PartRef};

/// Ops `first..first + count` of ticket `key`, each sent whole (offset 0, its own
/// address) and never redirected yet. `len` is each op's part length: the bytes a
/// read returns (0 for a procedure, whose part names no range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub key: u32,
    pub first: u32,
    pub count: u32,
    pub len: u32,
    pub kind: Kind,
}

impl Run {
    /// Op `first + k` as a single part, at the address its op names.
    pub fn part(&self, k: u32, addr: u64) -> PartRef {
        PartRef {
            key: self.key,
            op: self.first + k,
            op_off: 0,
            addr,
            len: self.len,
            redirects: 0,
            pauses: 0,
            kind: self.kind,
        }
    }
}

/// What an op appended to a frame is: a part, or an op sent whole (see [`Run`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Entry {
    One(PartRef),
    /// Ticket key, op index, part length, kind.
    Whole(u32, u32, u32, Kind),
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Item {
    One(PartRef),
    Run(Run),
}

/// The parts of one frame, in the order its ops were encoded.
#[derive(Debug, Default)]
pub(crate) struct PartList {
    items: Vec<Item>,
    /// Ops (replies expected) in all items.
    ops: usize,
}

impl PartList {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replies the frame's response must carry.
    pub fn len(&self) -> usize {
        self.ops
    }

    pub fn items(&self) -> &[Item] {
        &self.items
    }

    #[inline]
    pub fn add(&mut self, e: Entry) {
        match e {
            Entry::One(p) => self.push(p),
            Entry::Whole(key, op, len, kind) => self.push_whole(key, op, len, kind),
        }
    }

    pub fn push(&mut self, part: PartRef) {
        self.items.push(Item::One(part));
        self.ops += 1;
    }

    /// Adds op `op` of ticket `key`, sent whole; extends the last run when it is the
    /// same ticket's previous op of the same kind and length.
    #[inline]
    pub fn push_whole(&mut self, key: u32, op: u32, len: u32, kind: Kind) {
        self.ops += 1;
        if let Some(Item::Run(r)) = self.items.last_mut()
            && r.key == key
            && r.first + r.count == op
            && r.len == len
            && r.kind == kind
        {
            r.count += 1;
            return;
        }
        self.items.push(Item::Run(Run {
            key,
            first: op,
            count: 1,
            len,
            kind,
        }));
    }

    /// Adds ops `first..first + n` of ticket `key`, each sent whole.
    #[inline]
    pub fn push_whole_n(&mut self, key: u32, first: u32, n: u32, len: u32, kind: Kind) {
        if n == 0 {
            return;
        }
        self.push_whole(key, first, len, kind);
        if let Some(Item::Run(r)) = self.items.last_mut() {
            r.count += n - 1;
            self.ops += n as usize - 1;
        }
    }

    /// The parts from op `k` of item `at` on (the ones a response left unanswered).
    pub fn rest_from(&self, at: usize, k: u32) -> PartList {
        let mut rest = PartList::new();
        for (n, item) in self.items.iter().enumerate().skip(at) {
            match *item {
                Item::Run(r) if n == at => {
                    let rest_run = Run {
                        first: r.first + k,
                        count: r.count - k,
                        ..r
                    };
                    if rest_run.count > 0 {
                        rest.ops += rest_run.count as usize;
                        rest.items.push(Item::Run(rest_run));
                    }
                }
                Item::Run(r) => {
                    rest.ops += r.count as usize;
                    rest.items.push(Item::Run(r));
                }
                Item::One(p) => rest.push(p),
            }
        }
        rest
    }

    /// Every part as a single [`PartRef`]; `addr_of(key, op)` gives a run's op's
    /// address, or `None` when its ticket is gone (nobody waits: the op is skipped).
    pub fn into_parts(self, mut addr_of: impl FnMut(u32, u32) -> Option<u64>) -> Vec<PartRef> {
        let mut v = Vec::with_capacity(self.ops);
        for item in self.items {
            match item {
                Item::One(p) => v.push(p),
                Item::Run(r) => {
                    for k in 0..r.count {
                        if let Some(addr) = addr_of(r.key, r.first + k) {
                            v.push(r.part(k, addr));
                        }
                    }
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(key: u32, op: u32) -> PartRef {
        PartRef {
            key,
            op,
            op_off: 4,
            addr: 1000 + u64::from(op),
            len: 4,
            redirects: 1,
            pauses: 0,
            kind: Kind::Read,
        }
    }

    #[test]
    fn runs_grow_only_with_the_next_op_of_the_same_kind_and_length() {
        let mut l = PartList::new();
        for op in 0..5 {
            l.push_whole(7, op, 8, Kind::Read);
        }
        l.push_whole(7, 6, 8, Kind::Read); // a gap: op 5 went elsewhere
        l.push_whole(7, 7, 8, Kind::Write);
        l.push_whole(7, 8, 16, Kind::Write);
        l.push_whole(8, 9, 16, Kind::Write); // another ticket
        l.push(one(7, 10));
        l.push_whole(7, 11, 8, Kind::Read);
        assert_eq!(l.len(), 11);
        let runs: Vec<(u32, u32, u32)> = l
            .items()
            .iter()
            .filter_map(|i| match i {
                Item::Run(r) => Some((r.key, r.first, r.count)),
                Item::One(_) => None,
            })
            .collect();
        assert_eq!(
            runs,
            vec![
                (7, 0, 5),
                (7, 6, 1),
                (7, 7, 1),
                (7, 8, 1),
                (8, 9, 1),
                (7, 11, 1)
            ]
        );
    }

    #[test]
    fn the_rest_and_the_expansion_keep_op_order() {
        let mut l = PartList::new();
        for op in 0..4 {
            l.push_whole(3, op, 8, Kind::Read);
        }
        l.push(one(3, 9));
        l.push_whole(3, 10, 8, Kind::Read);
        let rest = l.rest_from(0, 1);
        assert_eq!(rest.len(), 5);
        let ops: Vec<u32> = rest
            .into_parts(|_, op| Some(u64::from(op) * 100))
            .iter()
            .map(|p| p.op)
            .collect();
        assert_eq!(ops, vec![1, 2, 3, 9, 10]);
        let parts = l.into_parts(|_, op| (op != 2).then_some(u64::from(op) * 100));
        assert_eq!(parts.len(), 5, "op 2's ticket is gone");
        assert_eq!(parts[1].addr, 100);
        assert_eq!((parts[1].op_off, parts[1].redirects), (0, 0));
        assert_eq!(parts[3], one(3, 9));
        assert_eq!(PartList::new().rest_from(0, 0).len(), 0);
    }
}
