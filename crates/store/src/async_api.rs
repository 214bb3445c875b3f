//! The async interface. GET, MGET and EXISTS are native: their batches are awaited
//! like the byte API's (`Ticket` futures, any executor), so no thread is blocked.
//! Writes and reads of erasure-coded values take several dependent round trips with
//! retries and backoff; they run on a small pool of store threads and their futures
//! complete when the pool finishes them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::lookup::Lookups;
use crate::options::PutOptions;
use crate::pool::Job;
use crate::put::PutResult;
use crate::store::{Probe, Store};
use crate::{Result, StoreError};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    gone: bool,
}

/// The result of work running on the store's pool.
pub struct StoreFuture<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> Future for StoreFuture<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut s = self.slot.lock();
        if let Some(v) = s.value.take() {
            return Poll::Ready(Ok(v));
        }
        if s.gone {
            return Poll::Ready(Err(StoreError::Options(
                "the store's worker stopped before finishing".into(),
            )));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Marks the slot finished even if the job panics, so its future never hangs.
struct Finish<T>(Arc<Mutex<Slot<T>>>);

impl<T> Drop for Finish<T> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.gone = true;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

impl Store {
    /// Runs `f` on this handle's pool.
    fn offload<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> T + Send + 'static,
    ) -> StoreFuture<T> {
        let slot = Arc::new(Mutex::new(Slot {
            value: None,
            waker: None,
            gone: false,
        }));
        let done = Finish(slot.clone());
        let store = self.clone();
        let job: Job = Box::new(move || {
            let v = f(&store);
            done.0.lock().value = Some(v);
            drop(done);
        });
        self.inner.pool.get().run(job);
        StoreFuture { slot }
    }

    /// [`Store::get`] as a future.
    pub async fn get_async(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let mut v = self.mget_async(&[key]).await?;
        v.pop().unwrap_or(Ok(None))
    }

    /// [`Store::exists`] as a future.
    pub async fn exists_async(&self, key: &[u8]) -> Result<bool> {
        let mut v = self.lookup_async(&[key], Probe::Exists).await?;
        v.pop().unwrap_or(Ok(None)).map(|v| v.is_some())
    }

    /// [`Store::mget`] as a future.
    pub async fn mget_async<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<Vec<Result<Option<Bytes>>>> {
        self.lookup_async(keys, Probe::Value).await
    }

    async fn lookup_async<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        probe: Probe,
    ) -> Result<Vec<Result<Option<Bytes>>>> {
        let (checked, at, mut out) = Self::check_keys(keys);
        let raw = {
            let mut l = Lookups::new(self, checked, probe);
            while !l.is_done() {
                let r = l.batch(self).submit().await;
                // A busy bucket is asked again at once: nothing to sleep on here.
                l.absorb(self, &r);
            }
            l.finish()
        };
        for (r, i) in raw.into_iter().zip(at) {
            let key = keys[i].as_ref();
            out[i] = Some(if Self::needs_more(&r, probe) {
                // Chunks of an erasure-coded value: on the pool.
                let owned = key.to_vec();
                self.offload(move |s| s.resolve(&owned, r, probe))
                    .await
                    .and_then(|x| x)
            } else {
                self.resolve(key, r, probe)
            });
        }
        Ok(out.into_iter().map(|o| o.unwrap_or(Ok(None))).collect())
    }

    /// [`Store::put`] as a future (on the store's pool).
    pub fn put_async(&self, key: &[u8], value: &[u8]) -> StoreFuture<Result<()>> {
        let (k, v) = (key.to_vec(), value.to_vec());
        self.offload(move |s| s.put(&k, &v))
    }

    /// [`Store::put_with`] as a future (on the store's pool).
    pub fn put_with_async(
        &self,
        key: &[u8],
        value: &[u8],
        opts: PutOptions,
    ) -> StoreFuture<PutResult> {
        let (k, v) = (key.to_vec(), value.to_vec());
        self.offload(move |s| s.put_with(&k, &v, opts))
    }

    /// [`Store::mput`] as a future (on the store's pool).
    pub fn mput_async<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        pairs: &[(K, V)],
    ) -> StoreFuture<Vec<Result<()>>> {
        let owned: Vec<(Vec<u8>, Vec<u8>)> = pairs
            .iter()
            .map(|(k, v)| (k.as_ref().to_vec(), v.as_ref().to_vec()))
            .collect();
        self.offload(move |s| s.mput(&owned))
    }

    /// [`Store::delete`] as a future (on the store's pool).
    pub fn delete_async(&self, key: &[u8]) -> StoreFuture<Result<bool>> {
        let k = key.to_vec();
        self.offload(move |s| s.delete(&k))
    }
}
