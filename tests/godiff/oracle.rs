//! The Go side: one run of the `godiff` program per batch of cases, JSON lines in and out.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::Value;

/// What either side says about one case. Errors compare by kind only: `ok` false on both sides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Answer {
    pub ok: bool,
    #[serde(rename = "match")]
    pub matched: Option<bool>,
    pub nanos: Option<i64>,
    pub fields: Option<Vec<String>>,
    /// Go's message (not compared).
    #[serde(skip_serializing)]
    pub error: String,
    pub panic: bool,
    /// Go's glob only: what the pattern's parse tree means by gobwas's grammar (not compared).
    pub grammar: Option<bool>,
    /// expr only: the value, as a one-item list (so that `nil` is `[null]`).
    pub value: Option<Vec<Value>>,
}

impl Answer {
    pub fn matched(m: bool) -> Self {
        Self {
            ok: true,
            matched: Some(m),
            ..Self::default()
        }
    }
    pub fn nanos(n: i64) -> Self {
        Self {
            ok: true,
            nanos: Some(n),
            ..Self::default()
        }
    }
    pub fn fields(f: Vec<String>) -> Self {
        Self {
            ok: true,
            fields: Some(f),
            ..Self::default()
        }
    }
    pub fn refused(why: impl Into<String>) -> Self {
        Self {
            error: why.into(),
            ..Self::default()
        }
    }
    /// The same answer, ignoring the error messages.
    pub fn agrees(&self, other: &Self) -> bool {
        self.ok == other.ok
            && self.panic == other.panic
            && self.matched == other.matched
            && self.nanos == other.nanos
            && self.fields == other.fields
            && self.value.as_deref().map(numbers_as_floats) == other.value.as_deref().map(numbers_as_floats)
    }
}

/// Go's JSON writes a whole float as an integer: compare every number as a float.
fn numbers_as_floats(values: &[Value]) -> Vec<Value> {
    fn walk(v: &Value) -> Value {
        match v {
            Value::Number(n) => n
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number),
            Value::Array(items) => Value::Array(items.iter().map(walk).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), walk(v))).collect()),
            other => other.clone(),
        }
    }
    values.iter().map(walk).collect()
}

/// The `godiff` binary: in one of the `TIPHYS_UPSTREAM_BIN` folders, or built (it takes seconds
/// with Go installed) by `tools/upstream/build.sh godiff`, once for all the tests of the process.
fn binary() -> &'static Path {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND.get_or_init(find_or_build)
}

fn find_or_build() -> PathBuf {
    if let Ok(dirs) = std::env::var("TIPHYS_UPSTREAM_BIN")
        && let Some(found) = std::env::split_paths(&dirs)
            .map(|d| d.join("godiff"))
            .find(|p| p.is_file())
    {
        return found;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("tools/upstream/build.sh"))
        .arg("godiff")
        .output()
        .expect("run bash");
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let path = Path::new(&dir).join("godiff");
    assert!(
        out.status.success() && path.is_file(),
        "the Go side of the differential tests is missing: no godiff in TIPHYS_UPSTREAM_BIN, and \
         `bash tools/upstream/build.sh godiff` failed (it needs Go 1.25 or newer on PATH):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// Go's answers to `cases`, in order.
pub fn ask(cases: &[Value]) -> Vec<Answer> {
    let mut child = Command::new(binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start godiff");
    let mut stdin = child.stdin.take().unwrap();
    let input: Vec<u8> = cases
        .iter()
        .flat_map(|c| {
            let mut line = serde_json::to_vec(c).unwrap();
            line.push(b'\n');
            line
        })
        .collect();
    // Write from a thread: the program answers as it reads, and both pipes are bounded.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let answers: Vec<Answer> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|line| serde_json::from_str(&line.unwrap()).unwrap())
        .collect();
    writer.join().unwrap().unwrap();
    assert!(child.wait().unwrap().success(), "godiff failed");
    assert_eq!(
        answers.len(),
        cases.len(),
        "godiff answered fewer cases than it was asked"
    );
    answers
}

/// Every case through both sides; the disagreements that `allowed` (case, Go's answer, ours →
/// the reason) does not excuse fail, all listed at once. The excused ones are counted by reason.
pub fn compare(
    what: &str,
    cases: &[Value],
    ours: impl Fn(&Value) -> Answer,
    allowed: impl Fn(&Value, &Answer, &Answer) -> Option<&'static str>,
) {
    let theirs = ask(cases);
    let mut wrong = Vec::new();
    let mut excused: std::collections::BTreeMap<&str, usize> = Default::default();
    for (case, go) in cases.iter().zip(&theirs) {
        let us = ours(case);
        if us.agrees(go) {
            continue;
        }
        if let Some(why) = allowed(case, go, &us) {
            *excused.entry(why).or_default() += 1;
            continue;
        }
        wrong.push(format!("{case}\n    go:     {go:?}\n    tiphys: {us:?}"));
    }
    eprintln!("{what}: {} cases; known differences: {excused:?}", cases.len());
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} cases differ from Go:\n{}",
        wrong.len(),
        cases.len(),
        wrong.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}
