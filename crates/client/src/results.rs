//! A batch's results: compact per-op cells that point into the response frames they
//! came in, so a 1024-op batch costs no allocation or reference count per op. Owned
//! [`Bytes`] are made only when the caller asks for one.

use bytes::Bytes;

use crate::error::{ClientError, OpError};

/// The outcome of one op, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutput {
    /// Bytes read (or a procedure's result).
    Data(Bytes),
    /// A write completed.
    Done,
    /// The old value returned by CAS / FETCH_ADD.
    Value(u64),
}

pub type OpResult = Result<OpOutput, OpError>;

/// Where one op's result is (16 bytes: a batch of 1024 ops keeps its cells in 16 KiB).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Cell {
    /// No answer yet; a finished op left here is a completed write.
    #[default]
    Pending,
    /// `len` bytes at `off` in frame `frame` of the batch.
    Data {
        frame: u32,
        off: u32,
        len: u32,
    },
    Done,
    Value(u64),
    /// The op failed: index into the batch's errors.
    Failed(u32),
}

/// Frames and errors of one batch, filled in as responses arrive.
#[derive(Debug, Default)]
pub(crate) struct Store {
    pub cells: Vec<Cell>,
    pub frames: Vec<Bytes>,
    pub errors: Vec<OpError>,
}

impl Store {
    pub fn new(n: usize) -> Self {
        Self {
            cells: vec![Cell::Pending; n],
            frames: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The index of `frame` among this batch's frames, adding it if it is new. Parts of
    /// one batch usually arrive in one frame, so only the last frame is compared.
    #[inline]
    pub fn frame(&mut self, frame: &Bytes) -> u32 {
        if let Some(last) = self.frames.last()
            && last.as_ptr() == frame.as_ptr()
            && last.len() == frame.len()
        {
            return (self.frames.len() - 1) as u32;
        }
        self.frames.push(frame.clone());
        (self.frames.len() - 1) as u32
    }

    /// Op `i` read `d`, a slice of `frame`.
    #[inline]
    pub fn set_view(&mut self, i: usize, frame: &Bytes, d: &[u8]) {
        let off = d.as_ptr() as usize - frame.as_ptr() as usize;
        let f = self.frame(frame);
        self.cells[i] = Cell::Data {
            frame: f,
            off: off as u32,
            len: d.len() as u32,
        };
    }

    /// Op `i` produced bytes of its own (a read assembled from several parts).
    pub fn set_owned(&mut self, i: usize, data: Bytes) {
        let len = data.len() as u32;
        self.frames.push(data);
        self.cells[i] = Cell::Data {
            frame: (self.frames.len() - 1) as u32,
            off: 0,
            len,
        };
    }

    #[inline]
    pub fn set(&mut self, i: usize, cell: Cell) {
        self.cells[i] = cell;
    }

    /// Op `i` failed; the first error an op meets is the one it reports.
    pub fn fail(&mut self, i: usize, e: OpError) {
        if !matches!(self.cells[i], Cell::Failed(_)) {
            self.errors.push(e);
            self.cells[i] = Cell::Failed((self.errors.len() - 1) as u32);
        }
    }

    /// Op `i` failed, replacing whatever it had.
    pub fn fail_over(&mut self, i: usize, e: OpError) {
        match self.cells[i] {
            Cell::Failed(at) => self.errors[at as usize] = e,
            _ => self.fail(i, e),
        }
    }

    pub fn is_pending(&self, i: usize) -> bool {
        self.cells[i] == Cell::Pending
    }
}

/// Results of a batch, index-aligned with the ops added. Reads are views into the
/// response frames: [`data`](Self::data) borrows them, [`bytes`](Self::bytes) and
/// [`get`](Self::get) hand out owned [`Bytes`] sharing the frame.
#[derive(Debug, Clone, Default)]
pub struct BatchResults {
    cells: Vec<Cell>,
    frames: Vec<Bytes>,
    errors: Vec<OpError>,
}

impl BatchResults {
    pub(crate) fn from_store(s: Store) -> Self {
        Self {
            cells: s.cells,
            frames: s.frames,
            errors: s.errors,
        }
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    #[inline]
    fn view(&self, frame: u32, off: u32, len: u32) -> &[u8] {
        self.frames
            .get(frame as usize)
            .and_then(|f| f.get(off as usize..off as usize + len as usize))
            .unwrap_or_default()
    }

    /// The result of op `i`, owned.
    pub fn get(&self, i: usize) -> Option<OpResult> {
        Some(match *self.cells.get(i)? {
            Cell::Data { frame, off, len } => Ok(OpOutput::Data(
                self.frames
                    .get(frame as usize)
                    .map(|f| f.slice(off as usize..off as usize + len as usize))
                    .unwrap_or_default(),
            )),
            Cell::Pending | Cell::Done => Ok(OpOutput::Done),
            Cell::Value(v) => Ok(OpOutput::Value(v)),
            Cell::Failed(at) => Err(self.errors[at as usize].clone()),
        })
    }

    /// Every result in op order, owned.
    pub fn iter(&self) -> impl Iterator<Item = OpResult> + '_ {
        (0..self.cells.len()).filter_map(|i| self.get(i))
    }

    pub fn into_vec(self) -> Vec<OpResult> {
        self.iter().collect()
    }

    /// Whether op `i` succeeded.
    pub fn is_ok(&self, i: usize) -> bool {
        self.cells
            .get(i)
            .is_some_and(|c| !matches!(c, Cell::Failed(_)))
    }

    /// Op `i`'s error, if it failed.
    pub fn error(&self, i: usize) -> Option<&OpError> {
        match self.cells.get(i)? {
            Cell::Failed(at) => self.errors.get(*at as usize),
            _ => None,
        }
    }

    /// How many ops failed.
    pub fn failed(&self) -> usize {
        self.errors.len()
    }

    /// The failed op with the lowest index, if any.
    pub fn first_error(&self) -> Option<&OpError> {
        if self.errors.is_empty() {
            return None;
        }
        self.cells.iter().find_map(|c| match c {
            Cell::Failed(at) => self.errors.get(*at as usize),
            _ => None,
        })
    }

    /// Bytes read by op `i`, borrowed from the response frame.
    pub fn data(&self, i: usize) -> Result<&[u8], ClientError> {
        match self.cells.get(i) {
            Some(Cell::Data { frame, off, len }) => Ok(self.view(*frame, *off, *len)),
            Some(Cell::Failed(at)) => Err(self.errors[*at as usize].clone().into()),
            _ => Err(ClientError::InvalidArgument(format!(
                "op {i} is not a read"
            ))),
        }
    }

    /// Bytes read by op `i`, owned (shares the frame; no copy).
    pub fn bytes(&self, i: usize) -> Result<Bytes, ClientError> {
        match self.get(i) {
            Some(Ok(OpOutput::Data(b))) => Ok(b),
            Some(Err(e)) => Err(e.into()),
            _ => Err(ClientError::InvalidArgument(format!(
                "op {i} is not a read"
            ))),
        }
    }

    /// Old value returned by CAS / FETCH_ADD op `i`.
    pub fn value(&self, i: usize) -> Result<u64, ClientError> {
        match self.cells.get(i) {
            Some(Cell::Value(v)) => Ok(*v),
            Some(Cell::Failed(at)) => Err(self.errors[*at as usize].clone().into()),
            _ => Err(ClientError::InvalidArgument(format!(
                "op {i} is not an atomic"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_share_frames_and_errors_keep_op_order() {
        let frame = Bytes::from_static(b"0123456789");
        let mut s = Store::new(4);
        s.set_view(0, &frame, &frame[2..5]);
        s.set_view(2, &frame, &frame[7..]);
        s.fail(3, OpError::Status(farcache_proto::Status::OutOfRange));
        s.fail(1, OpError::Status(farcache_proto::Status::Paused));
        s.fail(1, OpError::Status(farcache_proto::Status::Internal));
        assert_eq!(s.frames.len(), 1, "one frame for every view into it");
        let r = BatchResults::from_store(s);
        assert_eq!(r.data(0).unwrap(), b"234");
        assert_eq!(&r.bytes(2).unwrap()[..], b"789");
        assert_eq!(r.failed(), 2);
        assert_eq!(
            r.first_error(),
            Some(&OpError::Status(farcache_proto::Status::Paused)),
            "op 1 fails before op 3, and keeps its first error"
        );
        assert!(r.is_ok(0) && !r.is_ok(3));
        assert!(r.value(0).is_err());
        let all = r.into_vec();
        assert_eq!(all.len(), 4);
        assert_eq!(all[2], Ok(OpOutput::Data(Bytes::from_static(b"789"))));
    }
}
