//! The build facts `GET /api/version` reports to a signed-in caller, as Argo CD's release builds
//! stamp them: `BuildDate`, `GitCommit`, `GitTreeState` and `GitTag`, handed to the compiler as
//! `TIPHYS_BUILD_DATE`, `TIPHYS_GIT_COMMIT`, `TIPHYS_GIT_TREE_STATE` and `TIPHYS_GIT_TAG`.
//!
//! A packager may set any of them in the environment (checked, then passed on as given). Else
//! the date is `SOURCE_DATE_EPOCH` (reproducible builds) or the time this script runs, and the
//! git facts are asked of `git` about this package's own checkout. Without `git`, or outside a
//! checkout (a source archive, a vendored copy inside another repository), the git facts stay
//! empty: an empty field says "not known", a made-up one would mislead.

use std::path::Path;
use std::process::Command;

use super::BuildResult;

pub fn stamp() -> BuildResult {
    let root = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = Path::new(&root);
    let git = Git::of(root);
    let date = match given("TIPHYS_BUILD_DATE")? {
        Some(date) => check_date(date)?,
        None => build_date()?,
    };
    let commit = match given("TIPHYS_GIT_COMMIT")? {
        Some(commit) => check_commit(commit)?,
        None => git.as_ref().map(Git::commit).unwrap_or_default(),
    };
    let tree_state = match given("TIPHYS_GIT_TREE_STATE")? {
        Some(state) => check_tree_state(state)?,
        None => git.as_ref().map(Git::tree_state).unwrap_or_default(),
    };
    let tag = match given("TIPHYS_GIT_TAG")? {
        Some(tag) => tag,
        // A tag names a release only when the tree is exactly the tagged commit.
        None if tree_state == "clean" => git.as_ref().map(Git::exact_tag).unwrap_or_default(),
        None => String::new(),
    };
    if let Some(git) = &git {
        git.rerun_when_it_moves(root);
    }
    for (name, value) in [
        ("TIPHYS_BUILD_DATE", &date),
        ("TIPHYS_GIT_COMMIT", &commit),
        ("TIPHYS_GIT_TREE_STATE", &tree_state),
        ("TIPHYS_GIT_TAG", &tag),
    ] {
        println!("cargo:rustc-env={name}={value}");
    }
    Ok(())
}

/// A fact the environment sets, if it does.
fn given(name: &str) -> Result<Option<String>, String> {
    println!("cargo:rerun-if-env-changed={name}");
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{name} is not valid UTF-8")),
    }
}

fn check_date(date: String) -> Result<String, String> {
    let b = date.as_bytes();
    let shape = b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    if !shape && !date.is_empty() {
        return Err(format!(
            "TIPHYS_BUILD_DATE={date:?} is not a UTC time like 2026-01-31T12:00:00Z (`date -u +%Y-%m-%dT%H:%M:%SZ`)"
        ));
    }
    Ok(date)
}

fn check_commit(commit: String) -> Result<String, String> {
    let hex = commit
        .bytes()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    if !commit.is_empty() && !(hex && (commit.len() == 40 || commit.len() == 64)) {
        return Err(format!(
            "TIPHYS_GIT_COMMIT={commit:?} is not a full commit id (`git rev-parse HEAD`: 40 or 64 lower-case hex digits)"
        ));
    }
    Ok(commit)
}

fn check_tree_state(state: String) -> Result<String, String> {
    if !matches!(state.as_str(), "" | "clean" | "dirty") {
        return Err(format!(
            "TIPHYS_GIT_TREE_STATE={state:?} is neither \"clean\" nor \"dirty\" (nor empty: not known)"
        ));
    }
    Ok(state)
}

/// `SOURCE_DATE_EPOCH` if set, else now; as Argo CD prints it (`2026-01-31T12:00:00Z`).
fn build_date() -> Result<String, String> {
    let seconds = match given("SOURCE_DATE_EPOCH")? {
        Some(epoch) => epoch
            .trim()
            .parse::<i64>()
            .map_err(|_| format!("SOURCE_DATE_EPOCH={epoch:?} is not a number of seconds"))?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| "the system clock is before 1970".to_owned())?
            .as_secs() as i64,
    };
    Ok(rfc3339(seconds))
}

/// Seconds since 1970 as `YYYY-MM-DDTHH:MM:SSZ` (the proleptic Gregorian calendar; H. Hinnant's
/// days-to-civil algorithm), so the build needs no date crate.
fn rfc3339(seconds: i64) -> String {
    let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// This package's git checkout, when `git` runs and the package is the top of one.
struct Git {
    top: std::path::PathBuf,
}

impl Git {
    fn of(root: &Path) -> Option<Self> {
        let top = run_git(root, &["rev-parse", "--show-toplevel"])?;
        let (top, root) = (Path::new(&top).canonicalize().ok()?, root.canonicalize().ok()?);
        // Inside another project's repository, its commit is not this package's.
        (top == root).then_some(Self { top })
    }

    fn commit(&self) -> String {
        run_git(&self.top, &["rev-parse", "--verify", "HEAD"]).unwrap_or_default()
    }

    /// `clean` when `git status --porcelain` lists nothing (untracked files count, as in
    /// Argo CD's Makefile), else `dirty`; empty when git cannot tell.
    fn tree_state(&self) -> String {
        match run_git(&self.top, &["status", "--porcelain"]) {
            Some(listed) if listed.is_empty() => "clean".to_owned(),
            Some(_) => "dirty".to_owned(),
            None => String::new(),
        }
    }

    fn exact_tag(&self) -> String {
        run_git(&self.top, &["describe", "--exact-match", "--tags", "HEAD"]).unwrap_or_default()
    }

    /// Asks cargo to run this script again when the commit or a build input changes, so that
    /// the facts describe the sources being compiled (a "clean" binary built from edited
    /// sources would be a false statement). Not the index: `git status` in a shell rewrites it.
    fn rerun_when_it_moves(&self, root: &Path) {
        let mut paths = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
        if let Some(branch) = run_git(&self.top, &["symbolic-ref", "-q", "HEAD"]) {
            paths.push(branch);
        }
        for path in paths {
            if let Some(file) = run_git(&self.top, &["rev-parse", "--git-path", &path]) {
                let file = root.join(file);
                if file.exists() {
                    println!("cargo:rerun-if-changed={}", file.display());
                }
            }
        }
        // What is compiled into the binary (`proto`, `web` and the text order are already
        // watched by the steps that read them).
        for input in ["src", "build", "build.rs", "Cargo.toml", "Cargo.lock", ".cargo"] {
            println!("cargo:rerun-if-changed={input}");
        }
    }
}

/// `git ARGS` in `dir`, its trimmed output if it succeeded. Git reads no configuration that
/// could page or colour its answer.
fn run_git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_PAGER", "cat")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
