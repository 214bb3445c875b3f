//! `farcache._farcache`: the Python bindings of the farcache client and keyed store.
//! The Python package `farcache` (python/python/farcache) re-exports these classes and
//! adds the exception classes and the asyncio interface.
//!
//! Every call that talks to the network releases the GIL (`Python::detach`), so other
//! Python threads run while it waits.

mod buf;
mod cache;
mod errors;
mod store;

use std::time::Duration;

use farcache_client::{CacheToken, ClientConfig, ClusterSecret, Rights};
use farcache_store::{StoreExt, StoreOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::cache::Cache;
use crate::errors::Error;
use crate::store::Store;

/// A connection to a farcache cluster (its manager). Thread-safe; share it.
#[pyclass(frozen, module = "farcache._farcache")]
struct Client {
    inner: farcache_client::Client,
}

fn secret_from(obj: &Bound<'_, PyAny>) -> PyResult<ClusterSecret> {
    let r = if let Ok(s) = obj.cast::<PyString>() {
        ClusterSecret::from_hex(s.to_str()?.trim())
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        ClusterSecret::from_bytes(b.as_bytes())
    } else {
        return Err(Error::invalid("secret must be bytes (raw) or str (hex)").into());
    };
    r.map_err(|e| Error::new("AuthError", format!("secret: {e}")).into())
}

fn duration(what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|e| Error::invalid(format!("{what}: {secs} s: {e}")).into())
}

/// `json.loads` of a serializable value: status and cache tables as plain dicts.
fn to_py_json<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    let s = serde_json::to_string(v).map_err(|e| Error::new("ProtocolError", e.to_string()))?;
    py.import("json")?.call_method1("loads", (s,))
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (
        manager, secret=None, secret_file=None, token=None, connections=1, batch_size=64,
        queue_depth=4, op_timeout=10.0, connect_timeout=2.0, spin_us=50
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        manager: String,
        secret: Option<&Bound<'_, PyAny>>,
        secret_file: Option<std::path::PathBuf>,
        token: Option<&str>,
        connections: usize,
        batch_size: usize,
        queue_depth: usize,
        op_timeout: f64,
        connect_timeout: f64,
        spin_us: u64,
    ) -> PyResult<Self> {
        let given = [secret.is_some(), secret_file.is_some(), token.is_some()];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(Error::invalid("give at most one of secret, secret_file and token").into());
        }
        let mut cfg = ClientConfig::new(manager)
            .connections(connections)
            .batch_size(batch_size)
            .queue_depth(queue_depth)
            .op_timeout(duration("op_timeout", op_timeout)?)
            .spin(Duration::from_micros(spin_us));
        cfg.connect_timeout = duration("connect_timeout", connect_timeout)?;
        if let Some(s) = secret {
            cfg = cfg.secret(secret_from(s)?);
        } else if let Some(p) = secret_file {
            let s = ClusterSecret::load(&p).map_err(|e| {
                Error::new("AuthError", format!("secret file {}: {e}", p.display()))
            })?;
            cfg = cfg.secret(s);
        } else if let Some(t) = token {
            let t: CacheToken = t
                .trim()
                .parse()
                .map_err(|e| Error::new("AuthError", format!("token: {e}")))?;
            cfg = cfg.token(t);
        }
        // Otherwise the Rust client reads FARCACHE_TOKEN / FARCACHE_SECRET_FILE /
        // FARCACHE_SECRET.
        let inner = py
            .detach(move || farcache_client::Client::with_config(cfg))
            .map_err(Error::from)?;
        Ok(Self { inner })
    }

    /// The manager's address.
    #[getter]
    fn manager(&self) -> String {
        self.inner.config().manager.clone()
    }

    #[pyo3(signature = (name, capacity, region_size=None, replicas=0))]
    fn create(
        &self,
        py: Python<'_>,
        name: &str,
        capacity: u64,
        region_size: Option<u64>,
        replicas: u32,
    ) -> PyResult<Cache> {
        let opts = farcache_client::CreateOptions {
            region_size,
            replicas,
            from_file: None,
        };
        let c = py
            .detach(|| self.inner.create_with(name, capacity, &opts))
            .map_err(Error::from)?;
        Ok(Cache::new(c))
    }

    fn open(&self, py: Python<'_>, name: &str) -> PyResult<Cache> {
        let c = py.detach(|| self.inner.open(name)).map_err(Error::from)?;
        Ok(Cache::new(c))
    }

    fn delete(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        Ok(py.detach(|| self.inner.delete(name)).map_err(Error::from)?)
    }

    /// Grows or shrinks cache `name`; returns its new table as a dict.
    fn reshape<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        capacity: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let info = py
            .detach(|| self.inner.reshape(name, capacity))
            .map_err(Error::from)?;
        to_py_json(py, &info)
    }

    /// The cluster's servers, caches, migrations and losses, as a dict.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = py.detach(|| self.inner.status()).map_err(Error::from)?;
        to_py_json(py, &s)
    }

    /// A token for cache `name` (read-write, or read-only with `read_only=True`).
    #[pyo3(signature = (name, read_only=false))]
    fn issue_token(&self, py: Python<'_>, name: &str, read_only: bool) -> PyResult<String> {
        let rights = if read_only {
            Rights::ReadOnly
        } else {
            Rights::ReadWrite
        };
        Ok(py
            .detach(|| self.inner.issue_token(name, rights))
            .map_err(Error::from)?)
    }

    #[pyo3(signature = (
        name, capacity, avg_value_size=128, region_size=None, shard_size=None, replicas=0,
        large_threshold=None, ec_data=None, ec_parity=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn create_store(
        &self,
        py: Python<'_>,
        name: &str,
        capacity: u64,
        avg_value_size: u64,
        region_size: Option<u64>,
        shard_size: Option<u64>,
        replicas: u32,
        large_threshold: Option<u64>,
        ec_data: Option<u8>,
        ec_parity: Option<u8>,
    ) -> PyResult<Store> {
        let d = StoreOptions::default();
        let opts = StoreOptions {
            avg_value_size,
            shard_size,
            region_size,
            replicas,
            large_threshold: large_threshold.unwrap_or(d.large_threshold),
            ec_data: ec_data.unwrap_or(d.ec_data),
            ec_parity: ec_parity.unwrap_or(d.ec_parity),
        };
        let s = py
            .detach(|| self.inner.create_store(name, capacity, &opts))
            .map_err(Error::from)?;
        Ok(Store::new(s))
    }

    fn open_store(&self, py: Python<'_>, name: &str) -> PyResult<Store> {
        let s = py
            .detach(|| self.inner.open_store(name))
            .map_err(Error::from)?;
        Ok(Store::new(s))
    }

    fn __repr__(&self) -> String {
        format!("farcache.Client({:?})", self.inner.config().manager)
    }
}

#[pymodule]
fn _farcache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<Cache>()?;
    m.add_class::<cache::Batch>()?;
    m.add_class::<cache::BatchResults>()?;
    m.add_class::<Store>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
