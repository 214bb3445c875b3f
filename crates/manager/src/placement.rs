//! Region placement: which server gets each new region.
//!
//! Greedy per region: the cheapest server with room wins; among equally priced servers
//! the one with the most free memory (counting regions already planned in this call)
//! wins, so equal-price servers fill evenly; the lowest id breaks remaining ties so the
//! result is deterministic.

use farcache_proto::ServerId;

/// A server that may receive regions (callers pass only alive servers).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: ServerId,
    pub price_per_gib_hour: f64,
    /// Memory not yet promised to regions.
    pub free: u64,
}

/// Not enough room: nothing was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Bytes the request needs (`regions * region_size`).
    pub needed: u128,
    /// Free bytes over all candidates.
    pub free: u128,
    /// Regions the candidates could hold (free memory is only usable in whole regions).
    pub fits: u64,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "need {} bytes but alive servers have only {} bytes free ({} region(s) fit)",
            self.needed, self.free, self.fits
        )
    }
}

/// The index of the best candidate with room for a region that `eligible` accepts:
/// cheapest, then most free memory (`free`, as planned so far), then lowest id.
fn cheapest(
    candidates: &[Candidate],
    free: &[u64],
    region_size: u64,
    eligible: impl Fn(&Candidate) -> bool,
) -> Option<usize> {
    (0..candidates.len())
        .filter(|&i| free[i] >= region_size && eligible(&candidates[i]))
        .min_by(|&a, &b| {
            let (ca, cb) = (&candidates[a], &candidates[b]);
            ca.price_per_gib_hour
                .total_cmp(&cb.price_per_gib_hour)
                .then(free[b].cmp(&free[a]))
                .then(ca.id.cmp(&cb.id))
        })
}

/// Picks a server for each of `regions` new regions of `region_size` bytes.
pub fn place(
    candidates: &[Candidate],
    regions: usize,
    region_size: u64,
) -> Result<Vec<ServerId>, Shortfall> {
    let fits: u64 = candidates
        .iter()
        .map(|c| c.free.checked_div(region_size).unwrap_or(0))
        .fold(0, u64::saturating_add);
    let shortfall = || Shortfall {
        needed: regions as u128 * u128::from(region_size),
        free: candidates.iter().map(|c| u128::from(c.free)).sum(),
        fits,
    };
    if region_size == 0 || (fits as u128) < regions as u128 {
        return Err(shortfall());
    }
    let mut free: Vec<u64> = candidates.iter().map(|c| c.free).collect();
    let mut out = Vec::with_capacity(regions);
    for _ in 0..regions {
        let best = cheapest(candidates, &free, region_size, |_| true);
        // The whole-region count above means this cannot fail; stay total anyway.
        let Some(i) = best else {
            return Err(shortfall());
        };
        free[i] -= region_size;
        out.push(candidates[i].id);
    }
    Ok(out)
}

/// Picks `extra` backup servers for each region whose owner is `owners[i]`: never a
/// server already holding a copy of that region, otherwise by the same rule as
/// [`place`], counting the owners' regions against their free memory. An error says
/// which region found no distinct server with room.
pub fn place_backups(
    candidates: &[Candidate],
    owners: &[ServerId],
    extra: usize,
    region_size: u64,
) -> Result<Vec<Vec<ServerId>>, String> {
    let mut free: Vec<u64> = candidates.iter().map(|c| c.free).collect();
    for o in owners {
        if let Some(i) = candidates.iter().position(|c| c.id == *o) {
            free[i] = free[i].saturating_sub(region_size);
        }
    }
    let mut out = Vec::with_capacity(owners.len());
    for (region, &owner) in owners.iter().enumerate() {
        let mut copies: Vec<ServerId> = Vec::with_capacity(extra);
        for _ in 0..extra {
            let best = cheapest(candidates, &free, region_size, |c| {
                c.id != owner && !copies.contains(&c.id)
            });
            let Some(i) = best else {
                return Err(format!(
                    "region {region} needs {} copies on distinct servers, but only {} \
                     alive server(s) have room for another {region_size}-byte copy",
                    extra + 1,
                    copies.len() + 1
                ));
            };
            free[i] -= region_size;
            copies.push(candidates[i].id);
        }
        out.push(copies);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: u64 = 4096;

    fn c(id: ServerId, price: f64, free_regions: u64) -> Candidate {
        Candidate {
            id,
            price_per_gib_hour: price,
            free: free_regions * R,
        }
    }

    #[test]
    fn equal_price_servers_fill_evenly() {
        let got = place(&[c(1, 1.0, 10), c(2, 1.0, 10), c(3, 1.0, 10)], 6, R).unwrap();
        for id in 1..=3 {
            assert_eq!(got.iter().filter(|&&s| s == id).count(), 2, "{got:?}");
        }
    }

    #[test]
    fn cheaper_servers_fill_first_then_spill() {
        let got = place(&[c(1, 2.0, 10), c(2, 0.5, 3)], 5, R).unwrap();
        assert_eq!(got, vec![2, 2, 2, 1, 1]);
    }

    #[test]
    fn most_free_then_lowest_id_break_ties() {
        // Server 2 has more room, so it goes first; then they are equal and id 1 wins.
        let got = place(&[c(1, 1.0, 2), c(2, 1.0, 3)], 3, R).unwrap();
        assert_eq!(got, vec![2, 1, 2]);
    }

    #[test]
    fn partial_regions_of_free_memory_do_not_count() {
        let cands = [Candidate {
            id: 1,
            price_per_gib_hour: 1.0,
            free: R + R / 2,
        }];
        assert_eq!(place(&cands, 1, R).unwrap(), vec![1]);
        let err = place(&cands, 2, R).unwrap_err();
        assert_eq!(err.fits, 1);
        assert_eq!(err.needed, 2 * u128::from(R));
        assert_eq!(err.free, u128::from(R + R / 2));
        assert!(err.to_string().contains("need 8192 bytes"), "{err}");
    }

    #[test]
    fn backups_go_to_distinct_servers_with_room() {
        let cands = [c(1, 1.0, 4), c(2, 1.0, 4), c(3, 1.0, 1)];
        let owners = [1, 2, 1];
        let b = place_backups(&cands, &owners, 1, R).unwrap();
        for (o, copies) in owners.iter().zip(&b) {
            assert_eq!(copies.len(), 1);
            assert_ne!(copies[0], *o, "a backup never shares its owner's server");
        }
        let two = place_backups(&cands, &[1], 2, R).unwrap();
        assert_eq!(two[0].len(), 2);
        assert!(!two[0].contains(&1) && two[0][0] != two[0][1]);
        // Three copies need three servers.
        let err = place_backups(&cands[..2], &[1], 2, R).unwrap_err();
        assert!(err.contains("3 copies"), "{err}");
        // Room counts the owners' own regions: server 3 has room for one backup only.
        let err = place_backups(&[c(1, 1.0, 1), c(3, 1.0, 1)], &[1, 1], 1, R).unwrap_err();
        assert!(err.contains("region 1"), "{err}");
    }

    #[test]
    fn no_candidates_or_zero_regions() {
        assert!(place(&[], 1, R).is_err());
        assert_eq!(place(&[], 0, R).unwrap(), Vec::<ServerId>::new());
        assert!(place(&[c(1, 1.0, 1)], 1, 0).is_err());
    }
}
