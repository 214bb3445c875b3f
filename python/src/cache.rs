//! `Cache`, `Batch` and `BatchResults`.

use parking_lot::Mutex;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::buf::Buf;
use crate::errors::Error;

/// A cache: the byte array `[0, capacity)` spread over the cluster's servers.
#[pyclass(frozen, module = "farcache._farcache")]
pub struct Cache {
    inner: farcache_client::Cache,
}

impl Cache {
    pub fn new(inner: farcache_client::Cache) -> Self {
        Self { inner }
    }
}

/// A FETCH_ADD delta: any int that fits in u64 or i64 (negative adds wrap).
fn delta_of(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(v) = obj.extract::<u64>() {
        return Ok(v);
    }
    obj.extract::<i64>()
        .map(|v| v as u64)
        .map_err(|_| Error::invalid("delta must be an int in [-2**63, 2**64)").into())
}

/// Addresses as a `Vec<u64>`: a uint64 buffer (numpy) is read in one copy, anything
/// else is iterated.
fn addrs_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Ok(b) = PyBuffer::<u64>::get(obj) {
        return b.to_vec(py);
    }
    if let Ok(b) = PyBuffer::<i64>::get(obj) {
        let v = b.to_vec(py)?;
        return v
            .into_iter()
            .map(|a| {
                u64::try_from(a).map_err(|_| Error::invalid(format!("negative address {a}")).into())
            })
            .collect();
    }
    obj.try_iter()?
        .map(|a| a.and_then(|a| a.extract::<u64>()))
        .collect()
}

#[pymethods]
impl Cache {
    #[getter]
    fn name(&self) -> String {
        self.inner.name()
    }

    #[getter]
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    #[getter]
    fn region_size(&self) -> u64 {
        self.inner.info().region_size
    }

    #[getter]
    fn id(&self) -> u64 {
        u64::from(self.inner.id())
    }

    /// The cache's read-write and read-only tokens (on a handle from `create`).
    #[getter]
    fn tokens<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(t) = self.inner.tokens() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("read_write", &t.read_write)?;
        d.set_item("read_only", &t.read_only)?;
        Ok(Some(d))
    }

    /// The region table as a dict.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::to_py_json(py, &*self.inner.info())
    }

    /// Re-reads the region table from the manager.
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.refresh()).map_err(Error::from)?;
        Ok(())
    }

    fn reshape(&self, py: Python<'_>, capacity: u64) -> PyResult<()> {
        Ok(py
            .detach(|| self.inner.reshape(capacity))
            .map_err(Error::from)?)
    }

    /// Acknowledges that `[addr, addr+len)` was lost: it reads as zeros from now on.
    fn clear_lost(&self, py: Python<'_>, addr: u64, len: u64) -> PyResult<()> {
        Ok(py
            .detach(|| self.inner.clear_lost(addr, len))
            .map_err(Error::from)?)
    }

    /// `n` bytes at `addr`.
    fn read<'py>(&self, py: Python<'py>, addr: u64, n: u64) -> PyResult<Bound<'py, PyBytes>> {
        let b = py
            .detach(|| self.inner.read(addr, n))
            .map_err(Error::from)?;
        Ok(PyBytes::new(py, &b))
    }

    /// Fills `buffer` (any writable C-contiguous buffer: bytearray, memoryview, numpy
    /// array) with the bytes at `addr`; returns the number of bytes read.
    fn read_into(&self, py: Python<'_>, addr: u64, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        let buf = Buf::writable(buffer)?;
        let view = buf.view();
        let n = buf.len();
        py.detach(|| -> Result<(), Error> {
            let data = self.inner.read(addr, n as u64)?;
            // SAFETY: `buf` is writable and outlives this closure.
            if data.len() != n || !unsafe { view.fill(0, &data) } {
                return Err(Error::new(
                    "ProtocolError",
                    format!("asked {n} bytes, got {}", data.len()),
                ));
            }
            Ok(())
        })?;
        Ok(n)
    }

    /// Writes `data` (any bytes-like object) at `addr`.
    fn write(&self, py: Python<'_>, addr: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = Buf::readable(data)?;
        let view = buf.view();
        py.detach(|| {
            // SAFETY: `buf` outlives this closure.
            self.inner.write(addr, &unsafe { view.bytes() })
        })
        .map_err(Error::from)?;
        Ok(())
    }

    /// Compare-and-swap of the little-endian u64 at `addr` (8-byte aligned); returns
    /// the old value (the swap happened iff it equals `expected`).
    fn cas(&self, py: Python<'_>, addr: u64, expected: u64, new: u64) -> PyResult<u64> {
        Ok(py
            .detach(|| self.inner.cas(addr, expected, new))
            .map_err(Error::from)?)
    }

    /// Wrapping add to the little-endian u64 at `addr`; returns the old value.
    fn fetch_add(&self, py: Python<'_>, addr: u64, delta: &Bound<'_, PyAny>) -> PyResult<u64> {
        let d = delta_of(delta)?;
        Ok(py
            .detach(|| self.inner.fetch_add(addr, d))
            .map_err(Error::from)?)
    }

    /// Runs stored procedure `proc` at the server holding `addr`; returns its output.
    #[pyo3(signature = (proc, addr, args=None))]
    fn execute<'py>(
        &self,
        py: Python<'py>,
        proc: &str,
        addr: u64,
        args: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let buf = args.map(Buf::readable).transpose()?;
        let view = buf.as_ref().map(Buf::view);
        let out = py
            .detach(|| {
                // SAFETY: `buf` outlives this closure.
                let a = view.map(|v| unsafe { v.bytes() }).unwrap_or_default();
                self.inner.execute(proc, addr, &a)
            })
            .map_err(Error::from)?;
        Ok(PyBytes::new(py, &out))
    }

    /// Registers a WebAssembly procedure (binary or text) under `name`.
    fn register(&self, py: Python<'_>, name: &str, code: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = Buf::readable(code)?;
        let view = buf.view();
        py.detach(|| {
            // SAFETY: `buf` outlives this closure.
            self.inner.register(name, &unsafe { view.bytes() })
        })
        .map_err(Error::from)?;
        Ok(())
    }

    /// An empty batch on this cache.
    fn batch(&self) -> Batch {
        Batch {
            inner: Mutex::new(Some(self.inner.batch())),
        }
    }

    /// Reads `length` bytes at each address of `addrs` (a list of ints or a numpy
    /// uint64 array) in one batch. Without `out` returns a list of `bytes`; with
    /// `out` (a writable buffer of at least `len(addrs) * length` bytes) fills it,
    /// read `i` at `[i*length, (i+1)*length)`, and returns None. A failed read raises
    /// the error of the first failed address.
    #[pyo3(signature = (addrs, length, out=None))]
    fn read_many<'py>(
        &self,
        py: Python<'py>,
        addrs: &Bound<'py, PyAny>,
        length: u64,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let addrs = addrs_of(py, addrs)?;
        let out = out.map(Buf::writable).transpose()?;
        let need = (addrs.len() as u64)
            .checked_mul(length)
            .ok_or_else(|| Error::invalid("len(addrs) * length overflows"))?;
        if let Some(o) = &out
            && (o.len() as u64) < need
        {
            return Err(Error::invalid(format!("out has {} bytes, {need} needed", o.len())).into());
        }
        let view = out.as_ref().map(Buf::view);
        let results = py.detach(|| -> Result<farcache_client::BatchResults, Error> {
            let mut b = self.inner.batch().with_capacity(addrs.len());
            for &a in &addrs {
                b.read(a, length);
            }
            let r = b.run();
            if let Some(e) = r.first_error() {
                return Err(e.into());
            }
            if let Some(v) = view
                && length > 0
            {
                let length = length as usize;
                for i in 0..addrs.len() {
                    // SAFETY: `out` is writable (checked long enough above) and
                    // outlives this closure.
                    if !unsafe { v.fill(i * length, r.data(i)?) } {
                        return Err(Error::new("ProtocolError", "reply longer than asked"));
                    }
                }
            }
            Ok(r)
        })?;
        if out.is_some() {
            return Ok(None);
        }
        let list = PyList::empty(py);
        for i in 0..results.len() {
            list.append(PyBytes::new(py, results.data(i).map_err(Error::from)?))?;
        }
        Ok(Some(list))
    }

    /// Writes `data[i*length:(i+1)*length]` at `addrs[i]` for every address, in one
    /// batch; `length` defaults to `len(data) // len(addrs)`.
    #[pyo3(signature = (addrs, data, length=None))]
    fn write_many(
        &self,
        py: Python<'_>,
        addrs: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        length: Option<usize>,
    ) -> PyResult<()> {
        let addrs = addrs_of(py, addrs)?;
        if addrs.is_empty() {
            return Ok(());
        }
        let buf = Buf::readable(data)?;
        let length = length.unwrap_or(buf.len() / addrs.len());
        if length.checked_mul(addrs.len()) != Some(buf.len()) {
            return Err(Error::invalid(format!(
                "data has {} bytes, not len(addrs) * length = {} * {length}",
                buf.len(),
                addrs.len()
            ))
            .into());
        }
        let view = buf.view();
        py.detach(|| -> Result<(), Error> {
            // SAFETY: `buf` outlives this closure.
            let src = unsafe { view.bytes() };
            let mut b = self.inner.batch().with_capacity(addrs.len());
            for (i, &a) in addrs.iter().enumerate() {
                b.write(a, &src[i * length..(i + 1) * length]);
            }
            match b.run().first_error() {
                Some(e) => Err(e.into()),
                None => Ok(()),
            }
        })?;
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "farcache.Cache(name={:?}, capacity={})",
            self.inner.name(),
            self.inner.capacity()
        )
    }
}

/// Ops submitted together: each method returns the op's index in the results.
#[pyclass(frozen, module = "farcache._farcache")]
pub struct Batch {
    /// `None` once run.
    inner: Mutex<Option<farcache_client::Batch>>,
}

impl Batch {
    fn with<T>(&self, f: impl FnOnce(&mut farcache_client::Batch) -> T) -> PyResult<T> {
        match self.inner.lock().as_mut() {
            Some(b) => Ok(f(b)),
            None => Err(Error::invalid("this batch has already run").into()),
        }
    }
}

#[pymethods]
impl Batch {
    fn read(&self, addr: u64, n: u64) -> PyResult<usize> {
        self.with(|b| b.read(addr, n))
    }

    fn write(&self, addr: u64, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        let buf = Buf::readable(data)?;
        // SAFETY: `buf` lives until the batch has copied the bytes.
        let d = unsafe { buf.view().bytes() };
        self.with(|b| b.write(addr, &d))
    }

    fn cas(&self, addr: u64, expected: u64, new: u64) -> PyResult<usize> {
        self.with(|b| b.cas(addr, expected, new))
    }

    fn fetch_add(&self, addr: u64, delta: &Bound<'_, PyAny>) -> PyResult<usize> {
        let d = delta_of(delta)?;
        self.with(|b| b.fetch_add(addr, d))
    }

    #[pyo3(signature = (proc, addr, args=None))]
    fn execute(&self, proc: &str, addr: u64, args: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let buf = args.map(Buf::readable).transpose()?;
        // SAFETY: `buf` lives until the batch has copied the bytes.
        let a = buf
            .as_ref()
            .map(|b| unsafe { b.view().bytes() })
            .unwrap_or_default();
        self.with(|b| b.execute(proc, addr, &a))
    }

    fn __len__(&self) -> usize {
        self.inner.lock().as_ref().map_or(0, |b| b.len())
    }

    /// Sends the ops and waits for every result. A batch runs once.
    fn run(&self, py: Python<'_>) -> PyResult<BatchResults> {
        let b = self
            .inner
            .lock()
            .take()
            .ok_or_else(|| Error::invalid("this batch has already run"))?;
        let inner = py.detach(move || b.run());
        Ok(BatchResults { inner })
    }
}

/// The results of a batch, index-aligned with its ops. Each op failed or succeeded
/// on its own.
#[pyclass(frozen, module = "farcache._farcache")]
pub struct BatchResults {
    inner: farcache_client::BatchResults,
}

impl BatchResults {
    fn index(&self, i: isize) -> PyResult<usize> {
        let n = self.inner.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "op {i} of a batch of {n}"
            )));
        }
        Ok(j as usize)
    }

    fn one<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        use farcache_client::OpOutput;
        match self.inner.get(i) {
            Some(Ok(OpOutput::Data(b))) => Ok(PyBytes::new(py, &b).into_any()),
            Some(Ok(OpOutput::Value(v))) => Ok(v.into_pyobject(py)?.into_any()),
            Some(Ok(OpOutput::Done)) | None => Ok(py.None().into_bound(py)),
            Some(Err(e)) => Err(Error::from(e).into()),
        }
    }
}

#[pymethods]
impl BatchResults {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Op `i`'s result: `bytes` for a read or procedure, `int` for CAS / FETCH_ADD,
    /// None for a write; raises the op's error if it failed.
    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyAny>> {
        let i = self.index(i)?;
        self.one(py, i)
    }

    /// Bytes read by op `i` (raises its error if it failed).
    fn data<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyBytes>> {
        let i = self.index(i)?;
        let d = self.inner.data(i).map_err(Error::from)?;
        Ok(PyBytes::new(py, d))
    }

    /// Old value returned by CAS / FETCH_ADD op `i` (raises its error if it failed).
    fn value(&self, i: isize) -> PyResult<u64> {
        let i = self.index(i)?;
        Ok(self.inner.value(i).map_err(Error::from)?)
    }

    /// Whether op `i` succeeded.
    fn ok(&self, i: isize) -> PyResult<bool> {
        Ok(self.inner.is_ok(self.index(i)?))
    }

    /// Op `i`'s error as an exception instance (not raised), or None.
    fn error<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Option<Bound<'py, PyAny>>> {
        let i = self.index(i)?;
        self.inner
            .error(i)
            .map(|e| Error::from(e).to_exception(py))
            .transpose()
    }

    /// How many ops failed.
    #[getter]
    fn failed(&self) -> usize {
        self.inner.failed()
    }

    /// Raises the error of the first failed op, if any.
    fn raise_first(&self) -> PyResult<()> {
        match self.inner.first_error() {
            Some(e) => Err(Error::from(e).into()),
            None => Ok(()),
        }
    }

    /// Every result in op order; a failed op is its exception instance.
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for i in 0..self.inner.len() {
            match self.one(py, i) {
                Ok(v) => list.append(v)?,
                Err(e) => list.append(e.into_value(py))?,
            }
        }
        Ok(list)
    }
}
