//! Recent migrations, promotions and losses, for `status`.
//!
//! Promotions and losses are part of the catalogue: each is stored in the same commit
//! as the region table that made it (a `Write::Event`, numbered), so a manager that
//! takes over or restarts still reports what was promoted and what was lost. Moves
//! describe this manager's run only (they lose nothing). Each list keeps the last
//! [`KEEP`] entries; the store drops an event once it falls out of its list.

use std::collections::VecDeque;

use farcache_proto::control::{LostRegion, MigrationRecord, Promotion};
use serde::{Deserialize, Serialize};

/// How many recent migrations, promotions and losses `status` shows.
pub const KEEP: usize = 1024;

/// An event the catalogue keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Lost(LostRegion),
    Promoted(Promotion),
}

/// Recent events: migrations of this run, promotions and losses of the catalogue.
#[derive(Debug, Default)]
pub struct Events {
    pub migrations: VecDeque<MigrationRecord>,
    pub lost: VecDeque<LostRegion>,
    pub promotions: VecDeque<Promotion>,
    /// The stored numbers of `lost` and `promotions`, entry by entry.
    lost_seqs: VecDeque<u64>,
    promotion_seqs: VecDeque<u64>,
    next_seq: u64,
}

/// What committing some events writes: each event under its number, and the
/// numbers of events that fall out of their lists.
#[derive(Debug, Default)]
pub struct Staged {
    pub put: Vec<(u64, Event)>,
    pub drop: Vec<u64>,
}

impl Events {
    /// The stored events, oldest first by number.
    pub fn from_stored(mut stored: Vec<(u64, Event)>) -> Self {
        stored.sort_by_key(|(seq, _)| *seq);
        let mut e = Self::default();
        for (seq, ev) in stored {
            e.insert(seq, ev);
        }
        e
    }

    /// Numbers the events for a commit, with what they push out of their lists.
    pub fn stage(&self, events: Vec<Event>) -> Staged {
        let mut staged = Staged::default();
        let (mut lost, mut promoted) = (self.lost_seqs.len(), self.promotion_seqs.len());
        let (mut lost_out, mut promoted_out) = (self.lost_seqs.iter(), self.promotion_seqs.iter());
        for (i, ev) in events.into_iter().enumerate() {
            let (len, out) = match &ev {
                Event::Lost(_) => (&mut lost, &mut lost_out),
                Event::Promoted(_) => (&mut promoted, &mut promoted_out),
            };
            if *len == KEEP {
                staged.drop.extend(out.next().copied());
            } else {
                *len += 1;
            }
            staged.put.push((self.next_seq + i as u64, ev));
        }
        staged
    }

    /// After the staged events were committed.
    pub fn committed(&mut self, staged: Staged) {
        for (seq, ev) in staged.put {
            self.insert(seq, ev);
        }
    }

    fn insert(&mut self, seq: u64, ev: Event) {
        self.next_seq = self.next_seq.max(seq + 1);
        match ev {
            Event::Lost(r) => {
                self.lost.push_back(r);
                self.lost_seqs.push_back(seq);
                if self.lost.len() > KEEP {
                    self.lost.pop_front();
                    self.lost_seqs.pop_front();
                }
            }
            Event::Promoted(p) => {
                self.promotions.push_back(p);
                self.promotion_seqs.push_back(seq);
                if self.promotions.len() > KEEP {
                    self.promotions.pop_front();
                    self.promotion_seqs.pop_front();
                }
            }
        }
    }

    pub fn migrated(&mut self, r: MigrationRecord) {
        if self.migrations.len() == KEEP {
            self.migrations.pop_front();
        }
        self.migrations.push_back(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(region: u32) -> Event {
        Event::Lost(LostRegion {
            cache: 1,
            region,
            was_on: 1,
            now_on: 2,
            reason: "killed".into(),
            reloaded: false,
        })
    }

    #[test]
    fn events_are_numbered_and_fall_out_of_full_lists() {
        let mut e = Events::default();
        for r in 0..KEEP as u32 {
            let s = e.stage(vec![lost(r)]);
            assert!(s.drop.is_empty());
            e.committed(s);
        }
        let s = e.stage(vec![lost(9000), lost(9001)]);
        assert_eq!(s.drop, vec![0, 1], "the two oldest fall out");
        assert_eq!(s.put[0].0, KEEP as u64);
        e.committed(s);
        assert_eq!(e.lost.len(), KEEP);
        assert_eq!(e.lost.front().map(|l| l.region), Some(2));
        assert_eq!(e.lost_seqs.front(), Some(&2));
        // What the store holds reads back the same.
        let stored: Vec<(u64, Event)> = e
            .lost_seqs
            .iter()
            .zip(&e.lost)
            .map(|(s, l)| (*s, Event::Lost(l.clone())))
            .rev()
            .collect();
        let back = Events::from_stored(stored);
        assert_eq!(back.lost, e.lost);
        assert_eq!(back.next_seq, e.next_seq);
    }
}
