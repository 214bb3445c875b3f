//! Bytes-like arguments through the buffer protocol: `bytes`, `bytearray`,
//! `memoryview`, numpy arrays and anything else exporting a C-contiguous buffer are
//! used in place, with the GIL released while the network call runs.

use std::borrow::Cow;

use farcache_sharedmem::bytes as shared;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::Error;

/// A pinned exported buffer. Holding it keeps the exporter from resizing or freeing
/// the memory (a `bytearray` refuses to resize while exported), so the pointer stays
/// valid while the GIL is released.
pub struct Buf {
    _guard: PyUntypedBuffer,
    ptr: usize,
    len: usize,
    readonly: bool,
}

impl Buf {
    fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        let guard = PyUntypedBuffer::get(obj).map_err(|_| {
            Error::invalid(format!(
                "expected a bytes-like object (buffer protocol), got {}",
                type_name(obj)
            ))
        })?;
        if !guard.is_c_contiguous() {
            return Err(Error::invalid("the buffer must be C-contiguous").into());
        }
        if writable && guard.readonly() {
            return Err(Error::invalid(format!(
                "the buffer must be writable ({} is read-only)",
                type_name(obj)
            ))
            .into());
        }
        let ptr = guard.buf_ptr() as usize;
        let len = guard.len_bytes();
        let readonly = guard.readonly();
        Ok(Self {
            _guard: guard,
            ptr,
            len,
            readonly,
        })
    }

    pub fn readable(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::get(obj, false)
    }

    pub fn writable(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::get(obj, true)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// A view usable without the GIL (the raw address is `Send`; the guard is not).
    pub fn view(&self) -> View {
        View {
            ptr: self.ptr,
            len: self.len,
            readonly: self.readonly,
        }
    }
}

/// The address and length of a [`Buf`]; valid while the `Buf` lives.
///
/// A writable buffer may be written by another thread while the GIL is released
/// (numpy does), so it is never seen as a Rust slice: that would be a data race.
/// Its bytes are copied with atomic word accesses instead (`farcache_sharedmem`),
/// and what a racing writer leaves is unspecified, but never unsafe.
#[derive(Clone, Copy)]
pub struct View {
    ptr: usize,
    len: usize,
    readonly: bool,
}

impl View {
    /// The bytes: borrowed from a read-only export (nobody may write it while it
    /// is exported), copied from a writable one.
    ///
    /// # Safety
    /// The `Buf` this came from must outlive the result.
    pub unsafe fn bytes<'a>(self) -> Cow<'a, [u8]> {
        if self.len == 0 {
            return Cow::Borrowed(&[]);
        }
        if self.readonly {
            // SAFETY: the exporter guarantees `len` readable bytes at `ptr` while
            // the export is held (the caller keeps it), and a read-only export is
            // not written meanwhile.
            return Cow::Borrowed(unsafe {
                std::slice::from_raw_parts(self.ptr as *const u8, self.len)
            });
        }
        // SAFETY: `len` readable bytes at `ptr`, held by the caller; racing writers
        // are other threads' atomic or foreign (C) accesses.
        Cow::Owned(unsafe { shared::to_vec(self.ptr as *const u8, self.len) })
    }

    /// Copies `src` into the buffer at byte `at`; false if it does not fit.
    ///
    /// # Safety
    /// The view must come from [`Buf::writable`], and its `Buf` still be alive.
    pub unsafe fn fill(self, at: usize, src: &[u8]) -> bool {
        if at > self.len || src.len() > self.len - at {
            return false;
        }
        // SAFETY: inside a writable export held by the caller (checked above).
        unsafe { shared::store((self.ptr as *mut u8).add(at), src) };
        true
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

/// A key: `str` (as UTF-8) or any bytes-like object.
pub fn key(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    let b = Buf::readable(obj)?;
    // SAFETY: `b` lives until the copy is made.
    Ok(unsafe { b.view().bytes() }.into_owned())
}

/// A value: `str` (as UTF-8) or any bytes-like object, copied.
pub fn owned(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    key(obj)
}
