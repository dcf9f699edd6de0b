//! Whether watch caches are filled, as any number of tasks can wait for it at once: each cache has exactly one waiter here, and everyone else waits on a `tokio::sync::watch`.
//!
//! kube-runtime 5.0.0's `Store::wait_until_ready` wakes only one of several tasks waiting at
//! the same time: its `DelayedInit` keeps one `oneshot::Receiver`, which holds the waker of
//! whichever task polled it last. Right after a restart every reconcile waits for the Job and
//! Pod caches at once, so all but one slept until their 30 s timeout. The test
//! `kube_runtime_wakes_one_of_several_waiters` below reproduces that on its own.

use std::future::Future;
use std::hash::Hash;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::runtime::reflector::{Lookup, Store};
use tokio::sync::watch;

/// A cache that stopped before it was filled, by what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the {0} cache stopped before it was filled")]
pub struct CacheStopped(pub &'static str);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Filling,
    Filled,
    Stopped(&'static str),
}

/// Whether a set of caches is filled. Cheap to clone; any number of tasks may wait at once.
#[derive(Clone, Debug)]
pub struct CachesReady(watch::Receiver<State>);

/// One cache to wait for: what it holds, and its one wait.
pub struct Cache {
    name: &'static str,
    filled: BoxFuture<'static, bool>,
}

impl Cache {
    /// The cache behind `store`, holding `name`s.
    pub fn new<K>(name: &'static str, store: &Store<K>) -> Cache
    where
        K: Lookup + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let store = store.clone();
        Cache {
            name,
            filled: async move { store.wait_until_ready().await.is_ok() }.boxed(),
        }
    }
}

impl CachesReady {
    /// The readiness of `caches`, and the future that waits for them (once each, in turn) and
    /// reports it: nothing is ever ready until that future runs, joined or spawned.
    pub fn of(caches: Vec<Cache>) -> (CachesReady, impl Future<Output = ()> + Send) {
        let (report, ready) = watch::channel(State::Filling);
        let wait = async move {
            for cache in caches {
                if !cache.filled.await {
                    report.send_replace(State::Stopped(cache.name));
                    return;
                }
            }
            report.send_replace(State::Filled);
        };
        (CachesReady(ready), wait)
    }

    /// Waits until every cache is filled.
    ///
    /// # Errors
    /// When a cache stopped first (or nothing reports any more), naming it.
    pub async fn wait(&self) -> Result<(), CacheStopped> {
        let mut ready = self.0.clone();
        let state = ready
            .wait_for(|state| *state != State::Filling)
            .await
            .map(|state| *state)
            .unwrap_or(State::Stopped("watched"));
        match state {
            State::Stopped(name) => Err(CacheStopped(name)),
            State::Filled | State::Filling => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    const WAITERS: usize = 16;

    /// Runs `WAITERS` tasks that each wait with `wait` from the same moment, fills the cache,
    /// and returns how many of them finished within a second.
    async fn woken_after_filling<F, Fut>(
        writer: &mut reflector::store::Writer<ConfigMap>,
        wait: F,
    ) -> usize
    where
        F: Fn() -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let waiters: Vec<_> = (0..WAITERS).map(|_| tokio::spawn(wait())).collect();
        // Let every waiter poll once, so all of them are waiting before the cache fills.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        tokio::time::sleep(Duration::from_secs(1)).await;
        waiters.iter().filter(|w| w.is_finished()).count()
    }

    /// The upstream defect on its own, for the kube-rs issue tracker: several tasks await
    /// `Store::wait_until_ready()` at once, the cache fills, and one of them wakes. If this
    /// fails, kube-runtime wakes them all now and [`CachesReady`] could go.
    #[tokio::test]
    async fn kube_runtime_wakes_one_of_several_waiters() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let woken = woken_after_filling(&mut writer, || {
            let store = store.clone();
            async move {
                store.wait_until_ready().await.unwrap();
            }
        })
        .await;
        assert_eq!(woken, 1, "kube-runtime 5.0.0 wakes one waiter of {WAITERS}");
    }

    #[tokio::test]
    async fn every_waiter_wakes_when_the_caches_fill() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let (ready, report) = CachesReady::of(vec![Cache::new("ConfigMap", &store)]);
        tokio::spawn(report);
        let woken = woken_after_filling(&mut writer, || {
            let ready = ready.clone();
            async move {
                ready.wait().await.unwrap();
            }
        })
        .await;
        assert_eq!(woken, WAITERS);
        assert_eq!(ready.wait().await, Ok(()), "and later waits return at once");
    }

    #[tokio::test]
    async fn a_cache_that_stops_before_filling_is_named() {
        let (jobs, jobs_writer) = reflector::store::<ConfigMap>();
        let (pods, _pods_writer) = reflector::store::<ConfigMap>();
        let (ready, report) =
            CachesReady::of(vec![Cache::new("Job", &jobs), Cache::new("Pod", &pods)]);
        tokio::spawn(report);
        drop(jobs_writer);
        assert_eq!(ready.wait().await, Err(CacheStopped("Job")));
    }
}
