//! `Store`: the keyed store (get / put / delete / mget / mput, TTLs, NX / XX).

use std::time::Duration;

use farcache_store::{Condition, PutOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::buf::{Buf, key, owned};
use crate::cache::Cache;
use crate::errors::Error;

/// A keyed store inside a cache. Keys and values are bytes-like (or `str`, taken as
/// UTF-8). Thread-safe; share it.
#[pyclass(frozen, module = "farcache._farcache")]
pub struct Store {
    inner: farcache_store::Store,
}

impl Store {
    pub fn new(inner: farcache_store::Store) -> Self {
        Self { inner }
    }
}

fn put_options(ttl: Option<f64>, nx: bool, xx: bool) -> PyResult<PutOptions> {
    let condition = match (nx, xx) {
        (true, true) => return Err(Error::invalid("nx and xx exclude each other").into()),
        (true, false) => Condition::IfAbsent,
        (false, true) => Condition::IfPresent,
        (false, false) => Condition::Always,
    };
    let ttl = match ttl {
        None => None,
        Some(s) if s > 0.0 => Some(
            Duration::try_from_secs_f64(s)
                .map_err(|e| Error::invalid(format!("ttl {s} s: {e}")))?,
        ),
        Some(s) => return Err(Error::invalid(format!("ttl must be > 0 seconds, got {s}")).into()),
    };
    Ok(PutOptions {
        ttl,
        condition,
        ..PutOptions::default()
    })
}

#[pymethods]
impl Store {
    /// The cache holding this store.
    #[getter]
    fn cache(&self) -> Cache {
        Cache::new(self.inner.cache().clone())
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.cache().name()
    }

    /// Largest value stored inline (larger ones are erasure coded across servers).
    #[getter]
    fn max_small_value(&self) -> u64 {
        self.inner.max_small_value()
    }

    /// The value of `key`, or None if it is absent or expired.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let k = self::key(key)?;
        let v = py.detach(|| self.inner.get(&k)).map_err(Error::from)?;
        Ok(v.map(|b| PyBytes::new(py, &b)))
    }

    /// Whether `key` is present (and not expired).
    fn exists(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = self::key(key)?;
        Ok(py.detach(|| self.inner.exists(&k)).map_err(Error::from)?)
    }

    /// Stores `value` under `key`. `ttl` (seconds) expires it; `nx` puts only if the
    /// key is absent, `xx` only if present. Returns whether the put applied.
    #[pyo3(signature = (key, value, ttl=None, nx=false, xx=false))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
        nx: bool,
        xx: bool,
    ) -> PyResult<bool> {
        let opts = put_options(ttl, nx, xx)?;
        let k = self::key(key)?;
        let v = Buf::readable(value).ok();
        let copied = if v.is_none() {
            Some(owned(value)?)
        } else {
            None
        };
        let view = v.as_ref().map(Buf::view);
        Ok(py
            .detach(|| {
                // SAFETY: `v` outlives this closure.
                let val = match (&copied, view) {
                    (Some(c), _) => std::borrow::Cow::Borrowed(c.as_slice()),
                    (None, Some(view)) => unsafe { view.bytes() },
                    (None, None) => std::borrow::Cow::Borrowed(&[][..]),
                };
                self.inner.put_with(&k, &val, opts)
            })
            .map_err(Error::from)?)
    }

    /// Removes `key`; returns whether it was present.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = self::key(key)?;
        Ok(py.detach(|| self.inner.delete(&k)).map_err(Error::from)?)
    }

    /// The values of `keys` (None for absent ones), in one batch. A key that failed
    /// (e.g. an invalid key) raises its error.
    fn mget<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let ks = keys
            .try_iter()?
            .map(|k| k.and_then(|k| key(&k)))
            .collect::<PyResult<Vec<_>>>()?;
        let vals = py.detach(|| self.inner.mget(&ks)).map_err(Error::from)?;
        let list = PyList::empty(py);
        for v in vals {
            match v.map_err(Error::from)? {
                Some(b) => list.append(PyBytes::new(py, &b))?,
                None => list.append(py.None())?,
            }
        }
        Ok(list)
    }

    /// Stores many pairs (a dict or an iterable of (key, value)) in one pipeline.
    /// Raises the first failed pair's error after all were tried.
    #[pyo3(signature = (pairs, ttl=None))]
    fn mput(&self, py: Python<'_>, pairs: &Bound<'_, PyAny>, ttl: Option<f64>) -> PyResult<()> {
        let opts = put_options(ttl, false, false)?;
        let mut kv: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        if let Ok(d) = pairs.cast::<PyDict>() {
            for (k, v) in d.iter() {
                kv.push((key(&k)?, owned(&v)?));
            }
        } else {
            for p in pairs.try_iter()? {
                let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = p?.extract()?;
                kv.push((key(&k)?, owned(&v)?));
            }
        }
        let results = py.detach(|| self.inner.mput_with(&kv, opts));
        for r in results {
            r.map_err(Error::from)?;
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("farcache.Store(name={:?})", self.inner.cache().name())
    }
}
