//! The blocking half: listing refs and fetching one commit with gix, on a thread of its own
//! (see `Client::blocking`), watched for size and for the caller's deadline.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gix::protocol::transport::client::blocking_io::Transport;
use gix::remote::Direction;

use super::snapshot::Snapshot;
use super::transport;
use super::{GitError, Limits, Refs, Remote, RemoteRef};

/// Lists the refs of `remote` through the shared listing repository under the cache directory
/// (gix wants a repository to hang a remote on; listing writes nothing to it).
pub fn list_refs(limits: &Limits, remote: &Remote, stop: &Arc<AtomicBool>) -> Result<Refs, GitError> {
    let host = remote.host();
    let repo = open_or_init(&limits.cache_dir.join("ls-remote"), &host)?;
    let (map, _handshake) = connected(
        &repo,
        limits,
        remote,
        |gix_remote| {
            gix_remote.with_refspecs(
                ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                Direction::Fetch,
            )
        },
        |connection, failed| {
            if stop.load(Ordering::Relaxed) {
                return Err(timeout(&host, limits));
            }
            connection
                .ref_map(
                    gix::progress::Discard,
                    gix::remote::ref_map::Options {
                        prefix_from_spec_as_filter_on_remote: false,
                        ..Default::default()
                    },
                )
                .map_err(|e| failed(&e))
        },
    )?;
    let mut refs = Refs::default();
    for r in &map.remote_refs {
        use gix::protocol::handshake::Ref;
        match r {
            Ref::Peeled {
                full_ref_name,
                object,
                ..
            }
            | Ref::Direct {
                full_ref_name,
                object,
                ..
            } => refs.refs.push(RemoteRef {
                name: full_ref_name.to_string(),
                commit: object.to_string(),
            }),
            Ref::Symbolic {
                full_ref_name,
                target,
                object,
                ..
            } => {
                if full_ref_name == "HEAD" {
                    refs.head_target = Some(target.to_string());
                }
                refs.refs.push(RemoteRef {
                    name: full_ref_name.to_string(),
                    commit: object.to_string(),
                });
            }
            Ref::Unborn { .. } => {}
        }
    }
    Ok(refs)
}

/// Fetches `commit` (a full id) shallow into the repository of `remote` at `dir` unless it is
/// there already, and reads its tree.
pub fn fetch_commit(
    dir: &Path,
    limits: &Limits,
    remote: &Remote,
    commit: &str,
    stop: &Arc<AtomicBool>,
) -> Result<Snapshot, GitError> {
    let host = remote.host();
    let id = gix::ObjectId::from_hex(commit.as_bytes()).map_err(|_| no_revision(&host, commit))?;
    let started = std::time::Instant::now();
    let repo = open_or_init(dir, &host)?;
    if repo.find_commit(id).is_err() {
        receive(&repo, dir, limits, remote, commit, stop)?;
    }
    let fetched = started.elapsed();
    let repo = gix::open(dir).map_err(|_| GitError::Failed { host: host.clone() })?;
    let snapshot = Snapshot::read(repo, id, limits.max_bytes).map_err(|e| match e {
        GitError::NoRevision { .. } => no_revision(&host, commit),
        other => other,
    })?;
    tracing::debug!(
        host,
        fetch_ms = fetched.as_millis(),
        read_ms = (started.elapsed() - fetched).as_millis(),
        files = snapshot.files().len(),
        "commit fetched"
    );
    Ok(snapshot)
}

fn receive(
    repo: &gix::Repository,
    dir: &Path,
    limits: &Limits,
    remote: &Remote,
    commit: &str,
    stop: &Arc<AtomicBool>,
) -> Result<(), GitError> {
    let host = remote.host();
    let spec = format!("+{commit}:refs/tiphys/{commit}");
    let watch = SizeWatch::start(dir.join("objects"), limits.max_bytes, Arc::clone(stop));
    let result = connected(
        repo,
        limits,
        remote,
        |gix_remote| {
            gix_remote
                .with_fetch_tags(gix::remote::fetch::Tags::None)
                .with_refspecs([spec.as_str()], Direction::Fetch)
        },
        |connection, failed| {
            connection
                .prepare_fetch(gix::progress::Discard, Default::default())
                .and_then(|prepare| {
                    prepare
                        .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(NonZeroU32::MIN))
                        .receive(gix::progress::Discard, watch.interrupt())
                })
                .map_err(|e| {
                    let text = format!("{e:?}").to_lowercase();
                    // A want the server does not have: the revision names no commit there.
                    if text.contains("not our ref")
                        || text.contains("want") && text.contains("not valid")
                        || text.contains("no such")
                    {
                        no_revision(&host, commit)
                    } else {
                        failed(&e)
                    }
                })
        },
    );
    let too_large = watch.finish();
    if too_large {
        // What was received is not kept: the next call starts from an empty repository.
        let _ = std::fs::remove_dir_all(dir);
        return Err(GitError::TooLarge {
            host,
            limit: limits.max_bytes,
        });
    }
    if stop.load(Ordering::Relaxed) {
        return Err(timeout(&host, limits));
    }
    result.map(|_| ())
}

/// A connection to `remote` through `repo`, its remote set up by `configure`, handed to
/// `use_it` with the function that classifies its failures (with what `ssh` said).
fn connected<T>(
    repo: &gix::Repository,
    limits: &Limits,
    remote: &Remote,
    configure: impl FnOnce(gix::Remote<'_>) -> Result<gix::Remote<'_>, gix::Error>,
    use_it: impl FnOnce(
        gix::remote::Connection<'_, '_, '_, Box<dyn Transport + Send>>,
        &dyn Fn(&dyn std::fmt::Debug) -> GitError,
    ) -> Result<T, GitError>,
) -> Result<T, GitError> {
    let host = remote.host();
    let opened = transport::open(remote, &scratch(limits), limits.timeout)?;
    let files = opened.files;
    let failed = |e: &dyn std::fmt::Debug| transport::failure(e, files.as_ref(), &host);
    let url = transport::parse_url(remote)?;
    let gix_remote = repo.remote_at(url).map_err(|e| failed(&e))?;
    let gix_remote = configure(gix_remote).map_err(|e| failed(&e))?;
    let mut connection = gix_remote
        .to_connection_with_transport(opened.transport)
        .with_credentials(transport::credentials(remote));
    if let Some(options) = opened.http_options {
        connection = connection.with_transport_options(Box::new(options));
    }
    use_it(connection, &failed)
}

/// Raises the flag gix polls when the objects directory grows past `limit` during a fetch,
/// or when the caller gave up (`stop`).
struct SizeWatch {
    flags: Arc<WatchFlags>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct WatchFlags {
    /// Polled by gix.
    interrupt: AtomicBool,
    too_large: AtomicBool,
    done: AtomicBool,
}

impl SizeWatch {
    fn start(objects: PathBuf, limit: u64, stop: Arc<AtomicBool>) -> Self {
        let flags = Arc::new(WatchFlags::default());
        let watched = Arc::clone(&flags);
        let base = dir_size(&objects);
        let thread = std::thread::Builder::new()
            .name("repo-size-watch".to_owned())
            .spawn(move || {
                // Bounded: a fetch ends by its transport's timeout at the latest; the watch
                // gives up after an hour whatever happens.
                for _ in 0..36_000 {
                    if watched.done.load(Ordering::Relaxed) {
                        return;
                    }
                    if stop.load(Ordering::Relaxed) {
                        watched.interrupt.store(true, Ordering::Relaxed);
                    }
                    if dir_size(&objects).saturating_sub(base) > limit {
                        watched.too_large.store(true, Ordering::Relaxed);
                        watched.interrupt.store(true, Ordering::Relaxed);
                        return;
                    }
                    // Woken at once when the fetch ends (`finish`).
                    std::thread::park_timeout(Duration::from_millis(100));
                }
            })
            .ok();
        Self { flags, thread }
    }

    fn interrupt(&self) -> &AtomicBool {
        &self.flags.interrupt
    }

    /// Ends the watch; whether the size limit stopped the fetch.
    fn finish(mut self) -> bool {
        self.flags.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
        self.flags.too_large.load(Ordering::Relaxed)
    }
}

fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 1_000_000 {
                return total;
            }
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(entry.path()),
                Ok(meta) => total += meta.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn open_or_init(dir: &Path, host: &str) -> Result<gix::Repository, GitError> {
    let failed = || GitError::Failed {
        host: host.to_owned(),
    };
    if let Ok(repo) = gix::open(dir) {
        return Ok(repo);
    }
    std::fs::create_dir_all(dir).map_err(|_| failed())?;
    match gix::init_bare(dir) {
        Ok(repo) => Ok(repo),
        // Another call made it meanwhile.
        Err(_) => gix::open(dir).map_err(|_| failed()),
    }
}

fn scratch(limits: &Limits) -> PathBuf {
    limits.cache_dir.join("tmp")
}

fn timeout(host: &str, limits: &Limits) -> GitError {
    GitError::Timeout {
        host: host.to_owned(),
        after: limits.timeout,
    }
}

fn no_revision(host: &str, revision: &str) -> GitError {
    GitError::NoRevision {
        host: host.to_owned(),
        revision: revision.to_owned(),
    }
}
