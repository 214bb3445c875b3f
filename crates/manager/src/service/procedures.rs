//! Procedures registered on a cache: checked, loaded on every server of the cache,
//! then recorded so servers that receive its regions later load them too. Nothing is
//! recorded unless every live holder accepted the code.

use super::Service;
use crate::catalogue::ProcDef;
use crate::error::Reject;
use crate::store::Write;

/// Largest procedure module accepted.
pub const MAX_PROC_CODE: usize = 16 << 20;

impl Service {
    /// Loads a procedure on every server of `cache`, then records it so servers that
    /// receive regions of the cache later get it too. Nothing is recorded if a server
    /// refuses the code (it does not compile, or breaks the procedure ABI).
    pub(super) fn register_proc(
        &self,
        cache: &str,
        proc_name: &str,
        code: Vec<u8>,
    ) -> Result<(), Reject> {
        if proc_name.is_empty() || proc_name.len() > farcache_proto::op::MAX_PROC_NAME {
            return Err(Reject::invalid(format!(
                "procedure names have 1 to {} bytes",
                farcache_proto::op::MAX_PROC_NAME
            )));
        }
        if code.is_empty() || code.len() > MAX_PROC_CODE {
            return Err(Reject::invalid(format!(
                "procedure code must have 1 to {MAX_PROC_CODE} bytes"
            )));
        }
        let _changes = self.cluster.changes.lock();
        let (mut record, holders) = {
            let st = self.cluster.state.lock();
            self.cluster.cache_and_holders(&st.catalogue, cache)?
        };
        let def = ProcDef {
            name: proc_name.to_string(),
            code,
        };
        self.cluster
            .load_procs(record.id, &holders, std::slice::from_ref(&def))?;
        record.procs.retain(|p| p.name != def.name);
        record.procs.push(def);
        let mut st = self.cluster.state.lock();
        st.commit(&[Write::Cache(&record)])?;
        st.catalogue.insert_cache(record.clone());
        tracing::info!(cache = record.id, proc_name, "procedure registered");
        Ok(())
    }
}
