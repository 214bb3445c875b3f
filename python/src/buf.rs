//! Bytes-like arguments through the buffer protocol: `bytes`, `bytearray`,
//! `memoryview`, numpy arrays and anything else exporting a C-contiguous buffer are
//! used in place, with the GIL released while the network call runs.

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
        Ok(Self {
            _guard: guard,
            ptr,
            len,
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
        }
    }
}

/// The address and length of a [`Buf`]; valid while the `Buf` lives.
#[derive(Clone, Copy)]
pub struct View {
    ptr: usize,
    len: usize,
}

impl View {
    /// # Safety
    /// The `Buf` this came from must outlive the slice. Python code in another thread
    /// may write the buffer meanwhile (as with any extension that releases the GIL
    /// around a buffer, e.g. numpy); the bytes sent are then unspecified, not unsafe
    /// for this process's memory.
    pub unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the exporter guarantees `len` readable bytes at `ptr` while the
        // export (the `Buf`) is held, and the caller keeps it.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    /// # Safety
    /// As [`View::bytes`], on a buffer checked writable, and no other slice of it
    /// alive in this call.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: a writable export of `len` bytes, held by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len) }
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
    Ok(unsafe { b.view().bytes() }.to_vec())
}

/// A value: `str` (as UTF-8) or any bytes-like object, copied.
pub fn owned(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    key(obj)
}
