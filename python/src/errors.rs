//! Rust errors as Python exceptions. The classes live in `farcache/errors.py` (Python
//! classes can inherit from a builtin as well, e.g. `Timeout(FarcacheError,
//! TimeoutError)`); each Rust error maps to the class with the same meaning, and the
//! message is the Rust error's `Display`.

use farcache_client::{ClientError, OpError, Status};
use farcache_proto::blocking::RpcError;
use farcache_proto::control::ControlErrorCode;
use farcache_store::StoreError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

/// A failed call, on its way to becoming a Python exception.
#[derive(Debug)]
pub struct Error {
    /// Class name in `farcache.errors`.
    kind: &'static str,
    msg: String,
    /// Set as attributes of the exception (`addr`, `len`, `capacity`).
    attrs: Vec<(&'static str, u64)>,
}

impl Error {
    pub fn new(kind: &'static str, msg: impl Into<String>) -> Self {
        Self {
            kind,
            msg: msg.into(),
            attrs: Vec::new(),
        }
    }

    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::new("InvalidArgument", msg)
    }

    /// The exception instance (not raised), e.g. for `BatchResults.error(i)`.
    pub fn to_exception<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inst = errors_module(py)?
            .bind(py)
            .getattr(self.kind)?
            .call1((self.msg.as_str(),))?;
        for (k, v) in &self.attrs {
            inst.setattr(*k, *v)?;
        }
        Ok(inst)
    }
}

fn errors_module(py: Python<'_>) -> PyResult<&Py<PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE.get_or_try_init(py, || Ok(py.import("farcache.errors")?.unbind()))
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::attach(|py| match e.to_exception(py) {
            Ok(inst) => PyErr::from_value(inst),
            Err(err) => err,
        })
    }
}

fn control_kind(code: ControlErrorCode) -> &'static str {
    match code {
        ControlErrorCode::NotFound | ControlErrorCode::UnknownServer => "NotFound",
        ControlErrorCode::AlreadyExists => "AlreadyExists",
        ControlErrorCode::InsufficientMemory => "InsufficientMemory",
        ControlErrorCode::InvalidArgument => "InvalidArgument",
        // A server's own link; a client sees it only if it relays one.
        ControlErrorCode::Unavailable | ControlErrorCode::Fenced | ControlErrorCode::NotLeader => {
            "Unavailable"
        }
        ControlErrorCode::Internal => "ServerError",
        ControlErrorCode::Forbidden => "Forbidden",
    }
}

fn rpc_kind(e: &RpcError) -> &'static str {
    match e {
        RpcError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => "Timeout",
        // Unreachable manager, refused or dropped connection.
        RpcError::Io(_) => "Unavailable",
        RpcError::Auth(_) => "AuthError",
        RpcError::Remote { code, .. } => control_kind(*code),
        // Redirects are followed; one left over means the leader kept changing.
        RpcError::Redirect { .. } => "Unavailable",
        // The manager closes a handshake with a wrong proof with an error frame.
        RpcError::PeerError(m) if is_auth_text(m) => "AuthError",
        RpcError::Decode(_) | RpcError::PeerError(_) | RpcError::Unexpected(_) => "ProtocolError",
    }
}

fn is_auth_text(m: &str) -> bool {
    let m = m.to_ascii_lowercase();
    [
        "auth",
        "credential",
        "proof",
        "token",
        "secret",
        "forbidden",
    ]
    .iter()
    .any(|w| m.contains(w))
}

fn status_kind(s: Status) -> &'static str {
    match s {
        Status::OutOfRange => "OutOfBounds",
        Status::NoSuchCache | Status::NoSuchProc => "NotFound",
        Status::TooLarge => "TooLarge",
        Status::Misaligned => "Misaligned",
        Status::Forbidden | Status::ReadOnly => "Forbidden",
        // Still paused for migration after the op timeout.
        Status::Paused => "Timeout",
        Status::DataLost => "DataLost",
        Status::NoMemory => "InsufficientMemory",
        // Still refused by a server without a lease after the op timeout.
        Status::WrongServer | Status::NotServing => "Unavailable",
        Status::Ok | Status::Unsupported | Status::Internal => "ServerError",
    }
}

impl From<OpError> for Error {
    fn from(e: OpError) -> Self {
        Self::from(&e)
    }
}

impl From<&OpError> for Error {
    fn from(e: &OpError) -> Self {
        let mut attrs = Vec::new();
        let kind = match e {
            OpError::OutOfRange {
                addr,
                len,
                capacity,
            } => {
                attrs = vec![("addr", *addr), ("len", *len), ("capacity", *capacity)];
                "OutOfBounds"
            }
            OpError::ServerUnavailable { .. } | OpError::Redirects(_) | OpError::Refresh(_) => {
                "Unavailable"
            }
            OpError::Timeout { .. } => "Timeout",
            OpError::Status(s) => status_kind(*s),
            OpError::Misaligned(addr) => {
                attrs = vec![("addr", *addr)];
                "Misaligned"
            }
            OpError::Protocol { .. } => "ProtocolError",
            OpError::Procedure(_) | OpError::Hops(_) => "ProcedureError",
            OpError::DataLost { addr, len } => {
                attrs = vec![("addr", *addr), ("len", *len)];
                "DataLost"
            }
        };
        Self {
            kind,
            msg: e.to_string(),
            attrs,
        }
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        Self::from(&e)
    }
}

impl From<&ClientError> for Error {
    fn from(e: &ClientError) -> Self {
        let kind = match e {
            ClientError::Op(op) => return op.into(),
            ClientError::Manager { source, .. } => rpc_kind(source),
            ClientError::Rejected { code, .. } => control_kind(*code),
            ClientError::InvalidArgument(_) => "InvalidArgument",
            ClientError::NoCredential => "NoCredential",
        };
        Self::new(kind, e.to_string())
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Self::from(&e)
    }
}

impl From<&StoreError> for Error {
    fn from(e: &StoreError) -> Self {
        let kind = match e {
            StoreError::Client(c) => return (&**c).into(),
            StoreError::Op(op) => return (&**op).into(),
            StoreError::Format(_) | StoreError::Reply { .. } => "ProtocolError",
            StoreError::Key(_) => "InvalidKey",
            StoreError::ValueTooLarge { .. } => "ValueTooLarge",
            StoreError::Options(_) => "InvalidArgument",
            StoreError::Full { .. } => "StoreFull",
            StoreError::Contended { .. } => "Contended",
            StoreError::Unreadable { .. } => "DataLost",
            StoreError::Erasure(_) => "ServerError",
        };
        Self::new(kind, e.to_string())
    }
}
