//! Caches created from an SLO: the manager searches its performance model for the
//! cheapest transport that meets the SLO on the servers it has, then places the
//! cache on servers that can run that many worker threads.
//!
//! Cost ($/hour) is the memory (capacity at each holding server's price per
//! GiB-hour), plus `s` server cores at the price of the holding servers' class, plus
//! `c` client cores. Only the cores depend on the transport, so the search ranks by
//! them; the memory part is added once the servers are known.

use std::path::PathBuf;
use std::time::Instant;

use farcache_proto::ServerId;
use farcache_proto::control::{ControlErrorCode, PriceClass};
use farcache_proto::slo::{Slo, SloChoice, Transport};
use farcache_slo::{CorePrices, Model, SearchLimits, SloError};

use crate::catalogue::Catalogue;
use crate::error::{ManagerError, Reject};
use crate::placement::{self, Candidate};

const GIB: f64 = (1u64 << 30) as f64;

/// How the manager answers SLOs.
#[derive(Debug, Clone)]
pub struct SloSettings {
    /// The model `farcache calibrate` wrote; without one, SLO requests are refused.
    pub model: Option<PathBuf>,
    /// Use a model measured on another machine.
    pub any_machine: bool,
    /// Margin on both figures: predicted latency × (1 + headroom) within the bound,
    /// predicted throughput ≥ SLO × (1 + headroom). Absorbs measurement noise.
    pub headroom: f64,
    /// $/hour of one server core, by price class, and of one client core.
    pub spot_core_hour: f64,
    pub on_demand_core_hour: f64,
    pub client_core_hour: f64,
}

impl Default for SloSettings {
    fn default() -> Self {
        Self {
            model: None,
            any_machine: false,
            headroom: farcache_slo::DEFAULT_HEADROOM,
            spot_core_hour: farcache_slo::SPOT_CORE_HOUR,
            on_demand_core_hour: farcache_slo::ON_DEMAND_CORE_HOUR,
            client_core_hour: farcache_slo::CLIENT_CORE_HOUR,
        }
    }
}

/// A server that could hold the cache.
#[derive(Debug, Clone)]
pub(crate) struct SloCandidate {
    pub place: Candidate,
    /// Worker threads it runs.
    pub threads: u32,
    pub class: PriceClass,
}

/// The choice, and the servers that may hold the cache's regions.
pub(crate) struct Plan {
    pub choice: SloChoice,
    pub servers: Vec<ServerId>,
}

pub(crate) struct Planner {
    model: Option<Model>,
    settings: SloSettings,
}

impl Planner {
    /// Loads the model named in `settings`: a file from another machine or release
    /// stops the manager with the reason, rather than answering SLOs wrongly.
    pub fn load(settings: &SloSettings) -> Result<Self, ManagerError> {
        if !(0.0..10.0).contains(&settings.headroom) {
            return Err(ManagerError::Config(format!(
                "SLO headroom must be within [0, 10), not {}",
                settings.headroom
            )));
        }
        let model = match &settings.model {
            Some(p) => {
                let m = Model::load(p, settings.any_machine)
                    .map_err(|e| ManagerError::Config(e.to_string()))?;
                tracing::info!(model = %p.display(), id = %m.id(), sizes = ?m.record_sizes(), "SLO model loaded");
                Some(m)
            }
            None => None,
        };
        Ok(Self {
            model,
            settings: settings.clone(),
        })
    }

    fn core_hour(&self, class: PriceClass) -> f64 {
        match class {
            PriceClass::Spot => self.settings.spot_core_hour,
            PriceClass::OnDemand => self.settings.on_demand_core_hour,
        }
    }

    /// Searches the model for `slo` on a cache whose regions stay on `kept` (one
    /// server per region) and grow by `regions` new ones, given the alive servers
    /// (`candidates`), and places the new regions. `Plan::servers` lists every
    /// region's server, kept ones first.
    pub fn plan(
        &self,
        slo: &Slo,
        candidates: &[SloCandidate],
        kept: &[ServerId],
        regions: usize,
        region_size: u64,
    ) -> Result<Plan, Reject> {
        let model = self.model.as_ref().ok_or_else(|| {
            Reject::invalid(
                "this manager has no SLO model: run `farcache calibrate`, then start the \
                 manager with --slo-model FILE",
            )
        })?;
        let started = Instant::now();
        // Most threads a set of servers that can hold the whole cache all run.
        let mut levels: Vec<u32> = candidates.iter().map(|c| c.threads).collect();
        levels.sort_unstable();
        levels.dedup();
        let fits = |t: u32| {
            let room: u64 = candidates
                .iter()
                .filter(|c| c.threads >= t)
                .map(|c| c.place.free.checked_div(region_size).unwrap_or(0))
                .sum();
            room >= regions as u64
        };
        let max_s = levels
            .iter()
            .rev()
            .copied()
            .find(|&t| fits(t))
            .ok_or_else(|| {
                Reject::new(
                    ControlErrorCode::InsufficientMemory,
                    format!(
                        "no alive servers have room for {regions} region(s) of {region_size} bytes"
                    ),
                )
            })?;
        // Regions that stay where they are bound `s` by their servers' threads; a
        // holder that is not alive has no threads to count (recovery moves first).
        let mut kept_threads = u32::MAX;
        for &id in kept {
            let c = candidates
                .iter()
                .find(|c| c.place.id == id)
                .ok_or_else(|| {
                    Reject::unavailable(format!(
                        "server {id} holds part of this cache and is not alive: search again \
                     once its regions are recovered"
                    ))
                })?;
            kept_threads = kept_threads.min(c.threads);
        }
        let max_s = max_s.min(kept_threads);
        // Server cores are priced at the class the cheapest server with room is in.
        let class = candidates
            .iter()
            .filter(|c| c.threads >= 1 && c.place.free >= region_size)
            .min_by(|a, b| {
                a.place
                    .price_per_gib_hour
                    .total_cmp(&b.place.price_per_gib_hour)
            })
            .map_or(PriceClass::OnDemand, |c| c.class);
        let prices = CorePrices {
            server_core_hour: self.core_hour(class),
            client_core_hour: self.settings.client_core_hour,
        };
        let limits = SearchLimits {
            max_s,
            max_c: u32::MAX,
            headroom: self.settings.headroom,
        };
        let found = farcache_slo::search(model, slo, &limits, &prices).map_err(slo_reject)?;
        let search_us = started.elapsed().as_secs_f64() * 1e6;

        let t = found.transport;
        let eligible: Vec<Candidate> = candidates
            .iter()
            .filter(|c| c.threads >= t.s)
            .map(|c| c.place.clone())
            .collect();
        let placed = placement::place(&eligible, regions, region_size).map_err(|s| {
            Reject::new(
                ControlErrorCode::InsufficientMemory,
                format!("servers with {} worker thread(s): {s}", t.s),
            )
        })?;
        let servers: Vec<ServerId> = kept.iter().copied().chain(placed).collect();
        let choice = SloChoice {
            slo: slo.clone(),
            transport: t,
            predicted_latency_us: found.perf.latency(slo.percentile),
            predicted_throughput: found.perf.throughput,
            dollars_per_hour: self.cost(t, &servers, candidates, region_size),
            model: model.id(),
            search_us,
        };
        Ok(Plan { choice, servers })
    }

    /// $/hour of `t` with regions on `servers` (one entry per region).
    fn cost(
        &self,
        t: Transport,
        servers: &[ServerId],
        candidates: &[SloCandidate],
        region_size: u64,
    ) -> f64 {
        let find = |id: ServerId| candidates.iter().find(|c| c.place.id == id);
        let memory: f64 = servers
            .iter()
            .filter_map(|&id| find(id))
            .map(|c| c.place.price_per_gib_hour * region_size as f64 / GIB)
            .sum();
        // The class holding most regions prices the server cores.
        let spot = servers
            .iter()
            .filter(|&&id| find(id).is_some_and(|c| c.class == PriceClass::Spot))
            .count();
        let class = if spot * 2 >= servers.len() && spot > 0 {
            PriceClass::Spot
        } else {
            PriceClass::OnDemand
        };
        memory
            + f64::from(t.s) * self.core_hour(class)
            + f64::from(t.c) * self.settings.client_core_hour
    }
}

/// Every alive server, with its threads (its cores when it did not report them).
pub(crate) fn candidates(cat: &Catalogue) -> Vec<SloCandidate> {
    cat.candidates()
        .into_iter()
        .filter_map(|place| {
            let r = cat.server_record(place.id)?;
            Some(SloCandidate {
                threads: if r.threads == 0 { r.cores } else { r.threads },
                class: r.price_class,
                place,
            })
        })
        .collect()
}

fn slo_reject(e: SloError) -> Reject {
    Reject::invalid(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use farcache_slo::{Machine, ModelFile, Perf, Point, Section};

    fn planner() -> Planner {
        let mut f = ModelFile::new(Machine::detect(), 1);
        let points = [1u32, 2, 4]
            .iter()
            .map(|&b| Point {
                transport: Transport {
                    s: 1,
                    c: 1,
                    b,
                    q: 1,
                },
                perf: Perf {
                    p50_us: 10.0,
                    p99_us: 20.0,
                    throughput: 1e5 * f64::from(b),
                },
            })
            .collect();
        f.sections.push(Section {
            record_size: 8,
            read_fraction: 1.0,
            points,
        });
        Planner {
            model: Some(Model::from_file(f).expect("model")),
            settings: SloSettings::default(),
        }
    }

    fn server(id: ServerId, threads: u32) -> SloCandidate {
        SloCandidate {
            place: Candidate {
                id,
                price_per_gib_hour: 0.01,
                free: 1 << 30,
            },
            threads,
            class: PriceClass::Spot,
        }
    }

    #[test]
    fn a_holder_that_is_not_alive_is_refused_by_name() {
        let p = planner();
        let slo = Slo::new(8, 1e5, 100.0);
        let alive = [server(1, 1), server(2, 1)];
        let ok = p
            .plan(&slo, &alive, &[1, 2], 0, 1 << 20)
            .expect("both alive");
        assert_eq!(ok.servers, vec![1, 2]);
        assert_eq!(ok.choice.transport.b, 2, "{:?}", ok.choice);
        let e = p
            .plan(&slo, &alive, &[1, 3], 0, 1 << 20)
            .err()
            .expect("3 is gone");
        assert!(
            e.message.contains("server 3") && e.message.contains("not alive"),
            "{}",
            e.message
        );
    }

    #[test]
    fn servers_without_enough_threads_get_no_regions() {
        let p = planner();
        let slo = Slo::new(8, 1e5, 100.0);
        // Only s = 1 is in the model; a 0-thread entry never holds a region.
        let plan = p
            .plan(&slo, &[server(1, 0), server(2, 1)], &[], 3, 1 << 20)
            .expect("plan");
        assert_eq!(plan.servers, vec![2, 2, 2]);
        assert!(plan.choice.dollars_per_hour > 0.0);
    }
}
