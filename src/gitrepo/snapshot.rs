//! One commit's files as fetched: the list of paths with sizes, read from the tree once, and
//! the blobs read on demand from the repository on disk. Shared by every caller through a
//! small LRU keyed by repository access and commit.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::GitError;

/// What a commit says about itself (`RevisionMetadata`).
#[derive(Debug, Clone, Default)]
pub struct Commit {
    pub id: String,
    /// `Name <email>`, as git prints it.
    pub author: String,
    /// RFC 3339.
    pub date: String,
    pub message: String,
}

pub struct Snapshot {
    pub commit: Commit,
    files: Vec<(String, u64)>,
    ids: HashMap<String, gix::ObjectId>,
    repo: gix::ThreadSafeRepository,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("commit", &self.commit.id)
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

/// Files in one commit at most: past it the tree is refused (as too large).
const MAX_FILES: usize = 200_000;

impl Snapshot {
    /// Reads the tree of commit `id` in `repo`. Its blobs together may not exceed `max_bytes`.
    pub fn read(repo: gix::Repository, id: gix::ObjectId, max_bytes: u64) -> Result<Self, GitError> {
        let failed = || GitError::NoRevision {
            host: String::new(),
            revision: id.to_string(),
        };
        let commit = repo.find_commit(id).map_err(|_| failed())?;
        let tree = commit.tree().map_err(|_| failed())?;
        let mut recorder = gix::traverse::tree::Recorder::default();
        tree.traverse()
            .breadthfirst(&mut recorder)
            .map_err(|_| failed())?;
        let mut files = Vec::new();
        let mut ids = HashMap::new();
        let mut total = 0u64;
        for entry in recorder.records {
            if entry.mode.is_tree() || entry.mode.is_commit() {
                continue;
            }
            let path = entry.filepath.to_string();
            let size = repo.find_header(entry.oid).map(|h| h.size()).unwrap_or(0);
            total = total.saturating_add(size);
            if total > max_bytes || files.len() >= MAX_FILES {
                return Err(GitError::TooLarge {
                    host: String::new(),
                    limit: max_bytes,
                });
            }
            ids.insert(path.clone(), entry.oid);
            files.push((path, size));
        }
        files.sort();
        let info = Self::describe(&commit, id);
        drop(tree);
        drop(commit);
        Ok(Self {
            commit: info,
            files,
            ids,
            repo: repo.into_sync(),
        })
    }

    fn describe(commit: &gix::Commit<'_>, id: gix::ObjectId) -> Commit {
        Commit {
            id: id.to_string(),
            author: commit
                .author()
                .map(|a| format!("{} <{}>", a.name, a.email))
                .unwrap_or_default(),
            // The author's date, as upstream's `git show --format=%at`.
            date: commit
                .author()
                .ok()
                .and_then(|a| a.time().ok())
                .and_then(|t| jiff::Timestamp::from_second(t.seconds).ok())
                .map(|t| t.to_string())
                .unwrap_or_default(),
            message: commit
                .message_raw()
                .map(|m| m.to_string().trim_end().to_owned())
                .unwrap_or_default(),
        }
    }

    /// Every file (and symlink) with its size, sorted by path.
    pub fn files(&self) -> &[(String, u64)] {
        &self.files
    }

    /// One file's content; `None` when the commit has no such file.
    pub fn read_file(&self, path: &str) -> Option<Vec<u8>> {
        let id = self.ids.get(path)?;
        let repo = self.repo.to_thread_local();
        repo.find_blob(*id).ok().map(|blob| blob.data.clone())
    }
}

/// The last `capacity` snapshots used.
pub struct Lru {
    capacity: usize,
    order: VecDeque<String>,
    entries: HashMap<String, Arc<Snapshot>>,
}

impl Lru {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            order: VecDeque::new(),
            entries: HashMap::new(),
        }
    }

    pub fn get(&mut self, key: &str) -> Option<Arc<Snapshot>> {
        let found = self.entries.get(key).map(Arc::clone)?;
        self.touch(key);
        Some(found)
    }

    pub fn put(&mut self, key: String, snapshot: Arc<Snapshot>) {
        if self.entries.insert(key.clone(), snapshot).is_none() {
            self.order.push_back(key);
        } else {
            self.touch(&key);
        }
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }

    fn touch(&mut self, key: &str) {
        if let Some(at) = self.order.iter().position(|k| k == key)
            && let Some(k) = self.order.remove(at)
        {
            self.order.push_back(k);
        }
    }
}
