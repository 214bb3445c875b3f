//! Graphs in a farcache cache, and traversals that run next to them.
//!
//! - [`Csr`]: a graph in compressed sparse rows, with the reference BFS.
//! - [`kronecker_edges`]: Graph500's generator; [`read_edge_list`]: SNAP-style files;
//!   [`read_graph`]: those or graph-tool's `.gt`, gzipped or not.
//! - [`Layout`]: vertex-range partitions, one per region, so a vertex and its edges
//!   share a server; [`GraphCache`] writes a graph into a cache and opens it again.
//! - [`GraphCache::traverse`]: level-synchronous k-hop search for many sources, one
//!   `expand` call per server per level; [`GraphCache::traverse_by_reads`] is the same
//!   search by a client reading entries and edge lists, to compare against.

mod csr;
mod edgelist;
pub mod error;
mod gt;
mod kronecker;
mod layout;
pub mod model;
mod stored;
mod traverse;

pub use csr::Csr;
pub use edgelist::{EdgeList, read_edge_list};
pub use error::{GraphError, Result};
pub use gt::{ReadGraph, read_graph, read_gt};
pub use kronecker::kronecker_edges;
pub use layout::Layout;
pub use stored::{GraphCache, LoadOptions};
pub use traverse::{Traversal, TraversalStats};
