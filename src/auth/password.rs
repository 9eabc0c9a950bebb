//! bcrypt, off the async workers. Hashing is deliberately slow, so it runs on
//! a few dedicated low-priority threads fed by a bounded queue: a flood of
//! logins then queues (and past the bound is refused) instead of starving the
//! runtime that serves every other request.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

/// Argo CD's cost (Go's `bcrypt.DefaultCost`).
pub const COST: u32 = 10;

/// Checked for unknown users, so that they take as long as known ones: a
/// hash at [`COST`] of a random password that was thrown away. A constant,
/// so that no start-up time goes into making one; a match against it never
/// counts (see [`PasswordPool::verify`]).
const DUMMY_HASH: &str = "$2b$10$w.YHYcIMgTq5Oy8ne4pPGu3vpb4lv1uCFAlMVd9lpUVVQyBjDK0B2";

/// Niceness of the hashing threads: the scheduler lets request handling run first.
const NICENESS: i32 = 19;

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("too many password checks in progress")]
    Busy,
    #[error("password hashing failed: {0}")]
    Failed(String),
}

enum Job {
    Verify {
        password: String,
        /// `None`: an unknown user, checked against the dummy hash.
        hash: Option<Arc<str>>,
        reply: oneshot::Sender<bool>,
    },
    Hash {
        password: String,
        reply: oneshot::Sender<Result<String, String>>,
    },
}

/// A handle to the hashing threads; cheap to clone.
#[derive(Clone)]
pub struct PasswordPool {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for PasswordPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordPool").finish_non_exhaustive()
    }
}

impl PasswordPool {
    /// Starts `threads` hashing threads with room for `queue` waiting jobs.
    pub fn start(threads: usize, queue: usize) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>(queue.max(1));
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("bcrypt-{i}"))
                .spawn(move || worker(&rx))?;
        }
        Ok(Self { jobs: tx })
    }

    /// Checks `password` against `hash`; with no hash (an unknown user) a
    /// dummy hash is checked so that the answer takes the same time.
    pub async fn verify(&self, password: &str, hash: Option<&str>) -> Result<bool, PoolError> {
        let known = hash.is_some();
        let hash = hash.map(Arc::from);
        let (reply, answer) = oneshot::channel();
        self.submit(Job::Verify {
            password: password.to_owned(),
            hash,
            reply,
        })?;
        let matched = answer
            .await
            .map_err(|_| PoolError::Failed("worker stopped".into()))?;
        Ok(known && matched)
    }

    pub async fn hash(&self, password: &str) -> Result<String, PoolError> {
        let (reply, answer) = oneshot::channel();
        self.submit(Job::Hash {
            password: password.to_owned(),
            reply,
        })?;
        answer
            .await
            .map_err(|_| PoolError::Failed("worker stopped".into()))?
            .map_err(PoolError::Failed)
    }

    fn submit(&self, job: Job) -> Result<(), PoolError> {
        self.jobs.try_send(job).map_err(|_| PoolError::Busy)
    }
}

fn worker(rx: &std::sync::Mutex<mpsc::Receiver<Job>>) {
    lower_priority();
    loop {
        let job = {
            let Ok(mut rx) = rx.lock() else { return };
            rx.blocking_recv()
        };
        match job {
            None => return,
            Some(Job::Verify {
                password,
                hash,
                reply,
            }) => {
                let ok = match hash.as_deref() {
                    Some(h) => bcrypt::verify(password, h),
                    None => bcrypt::verify(password, DUMMY_HASH),
                }
                .unwrap_or(false);
                let _ = reply.send(ok);
            }
            Some(Job::Hash { password, reply }) => {
                let hashed = bcrypt::hash(password, COST).map_err(|e| e.to_string());
                let _ = reply.send(hashed);
            }
        }
    }
}

/// Lowers this thread's scheduling priority. Best effort: without it, logins
/// only compete harder with other requests.
fn lower_priority() {
    let tid = rustix::thread::gettid();
    if let Err(err) = rustix::process::setpriority_process(Some(tid), NICENESS) {
        tracing::debug!(error = %err, "could not lower the priority of a bcrypt thread");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dummy_hash_costs_what_real_hashes_cost() {
        let cost: u32 = DUMMY_HASH.split('$').nth(2).unwrap().parse().unwrap();
        assert_eq!(cost, COST);
        assert!(!bcrypt::verify("", DUMMY_HASH).unwrap());
    }

    #[tokio::test]
    async fn hash_then_verify() {
        let pool = PasswordPool::start(1, 4).unwrap();
        let hash = pool.hash("s3cret-pass").await.unwrap();
        assert!(hash.starts_with("$2b$10$"));
        assert!(pool.verify("s3cret-pass", Some(&hash)).await.unwrap());
        assert!(!pool.verify("wrong", Some(&hash)).await.unwrap());
        assert!(!pool.verify("s3cret-pass", None).await.unwrap());
    }

    #[tokio::test]
    async fn a_full_queue_is_refused_not_waited_on() {
        let pool = PasswordPool::start(1, 1).unwrap();
        let mut busy = 0;
        for _ in 0..8 {
            let job = Job::Verify {
                password: "x".into(),
                hash: None,
                reply: oneshot::channel().0,
            };
            if let Err(PoolError::Busy) = pool.submit(job) {
                busy += 1;
            }
        }
        assert!(busy > 0);
    }
}
