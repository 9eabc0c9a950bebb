//! Every file of every fuzz corpus (`fuzz/corpus/<target>/`: the seeds, and the inputs that
//! once made a target fail) replayed through the target's body, as a plain test: what the
//! fuzzer found stays fixed without a nightly toolchain.

use std::path::Path;

use tiphys::fuzzing::TARGETS;

#[test]
fn fuzz_corpora_replay_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut empty = Vec::new();
    let mut failed = Vec::new();
    for target in TARGETS {
        let dir = root.join(target.name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target needs a seed corpus)", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.is_file())
            .collect();
        files.sort();
        if files.is_empty() {
            empty.push(target.name);
        }
        for file in files {
            let data = std::fs::read(&file).unwrap();
            // A failure names the file, so it can be fed to `cargo fuzz run` again.
            if std::panic::catch_unwind(|| (target.run)(&data)).is_err() {
                failed.push(format!("{}: {}", target.name, file.display()));
            }
        }
    }
    assert!(empty.is_empty(), "targets with an empty corpus: {empty:?}");
    assert!(failed.is_empty(), "failing corpus files: {failed:#?}");
}

#[test]
fn every_corpus_and_fuzz_binary_is_a_target() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    for entry in std::fs::read_dir(fuzz.join("corpus")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            TARGETS.iter().any(|t| t.name == name),
            "fuzz/corpus/{name} belongs to no target of tiphys::fuzzing::TARGETS"
        );
    }
    for target in TARGETS {
        let binary = fuzz.join("fuzz_targets").join(format!("{}.rs", target.name));
        let text = std::fs::read_to_string(&binary)
            .unwrap_or_else(|e| panic!("{}: {e} (every target needs a fuzz binary)", binary.display()));
        assert!(
            text.contains(&format!("tiphys::fuzzing::{}(", target.name)),
            "{} does not call tiphys::fuzzing::{}",
            binary.display(),
            target.name
        );
    }
}
