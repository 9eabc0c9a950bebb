//! Build steps a user must not have to do by hand:
//! 1. compile `proto/` with a vendored `protoc` into the descriptor set the server's codec reads,
//!    and generate the CLI's client code for the account, session, settings and version services
//!    (and the server stubs of the benchmarks' bare-tonic baseline);
//! 2. build the UI in `web/` into `$OUT_DIR/web-dist`, which `src/ui` embeds, and copy Swagger UI
//!    (npm's `swagger-ui-dist`) into `$OUT_DIR/swagger-ui`, which `src/api/swagger.rs` embeds;
//! 3. ask the linker to lay out the server's running code side by side;
//! 4. stamp the build facts `GET /api/version` reports (`src/buildinfo.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

type BuildResult = Result<(), Box<dyn std::error::Error>>;

fn main() -> BuildResult {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    compile_protos(&out_dir)?;
    build_web(&out_dir)?;
    order_text()?;
    build_facts::stamp()?;
    Ok(())
}

#[path = "build/facts.rs"]
mod build_facts;

/// The functions listed in `benches/text-order.txt` (made by `benches/text-order.sh`: what a
/// server runs to start and to serve common requests) are placed first, next to each other, so
/// the pages of code a running server maps in are mostly code it runs: idle RSS 12 MB instead of
/// 19 MB. Names that no longer exist are skipped by the linker, so a stale list costs only
/// memory.
///
/// The option is LLD's, the linker rustc uses for this target by default; set
/// `TIPHYS_NO_TEXT_ORDER=1` when linking with another.
fn order_text() -> BuildResult {
    const LIST: &str = "benches/text-order.txt";
    println!("cargo:rerun-if-changed={LIST}");
    println!("cargo:rerun-if-env-changed=TIPHYS_NO_TEXT_ORDER");
    let lld_default = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    let opted_out = std::env::var_os("TIPHYS_NO_TEXT_ORDER").is_some_and(|v| !v.is_empty() && v != "0");
    let list = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join(LIST);
    if !lld_default || opted_out || !list.exists() {
        return Ok(());
    }
    // Relative to the package, where cargo runs the linker: an absolute path would be kept by
    // a build cache shared by checkouts (CI's) and break the link once that checkout is gone.
    println!("cargo:rustc-link-arg-bin=tiphys=-Wl,--symbol-ordering-file={LIST}");
    println!("cargo:rustc-link-arg-bin=tiphys=-Wl,--no-warn-symbol-ordering");
    Ok(())
}

fn compile_protos(out_dir: &Path) -> BuildResult {
    println!("cargo:rerun-if-changed=proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let include = protoc_bin_vendored::include_path()?;
    let protos: [PathBuf; 4] = [
        "proto/version/version.proto".into(),
        "proto/settings/settings.proto".into(),
        "proto/session/session.proto".into(),
        "proto/account/account.proto".into(),
    ];
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc.clone());
    // The server answers every method through the descriptor-driven table; the generated
    // server stubs serve only the bare-tonic baseline of the benchmarks.
    tonic_prost_build::configure().compile_with_config(
        config,
        &protos,
        &[Path::new("proto").to_path_buf(), include.clone()],
    )?;
    compile_api_schema(&protoc, &include, out_dir)
}

/// Every service the server answers has no generated Rust types on the server side: messages
/// are read at run time from this descriptor set by the schema-driven codec (`src/schema`),
/// which also feeds gRPC reflection.
fn compile_api_schema(protoc: &Path, include: &Path, out_dir: &Path) -> BuildResult {
    // Every file under `proto/` is part of the API schema.
    let mut files = Vec::new();
    collect_protos(Path::new("proto"), &mut files)?;
    files.sort();
    let mut cmd = Command::new(protoc);
    cmd.arg("--include_imports")
        .arg(format!(
            "--descriptor_set_out={}",
            out_dir.join("api_descriptor.bin").display()
        ))
        .arg("-Iproto")
        .arg(format!("-I{}", include.display()));
    for file in &files {
        cmd.arg(file.strip_prefix("proto")?);
    }
    run(&mut cmd)
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> BuildResult {
    if !dir.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}

/// The UI is built by npm unless `TIPHYS_WEB_DIST` names an already built
/// directory (for packagers who build the UI separately).
fn build_web(out_dir: &Path) -> BuildResult {
    println!("cargo:rerun-if-env-changed=TIPHYS_WEB_DIST");
    let dist = out_dir.join("web-dist");
    let swagger = out_dir.join("swagger-ui");
    std::fs::create_dir_all(&swagger)?;
    if let Ok(prebuilt) = std::env::var("TIPHYS_WEB_DIST") {
        copy_dir(Path::new(&prebuilt), &dist)?;
        // Without npm there is no Swagger UI: empty files, which the server answers with 404.
        for file in SWAGGER_UI_FILES {
            std::fs::write(swagger.join(file), b"")?;
        }
        return Ok(());
    }
    for input in [
        "web/src",
        "web/index.html",
        "web/package.json",
        "web/package-lock.json",
        "web/build.mjs",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }
    let npm_ok = Command::new("npm")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !npm_ok {
        return Err(
            "building the embedded UI needs Node.js and npm (Node 18 or newer): install them \
                    (e.g. `apt-get install nodejs npm`), or set TIPHYS_WEB_DIST to a built UI directory"
                .into(),
        );
    }
    // npm writes node_modules next to package.json; build in a copy under
    // OUT_DIR so the source tree stays clean and parallel builds do not race.
    let work = out_dir.join("web-src");
    copy_dir(Path::new("web"), &work)?;
    let lock_stamp = work.join("node_modules/.tiphys-lock");
    let lock = std::fs::read("web/package-lock.json")?;
    if std::fs::read(&lock_stamp).ok().as_deref() != Some(&lock[..]) {
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&work))?;
        std::fs::write(&lock_stamp, &lock)?;
    }
    run(Command::new("node")
        .arg("build.mjs")
        .arg(&dist)
        .current_dir(&work))?;
    // Swagger UI (`/swagger-ui`) is npm's `swagger-ui-dist`, pinned by the same lock file.
    for file in SWAGGER_UI_FILES {
        std::fs::copy(
            work.join("node_modules/swagger-ui-dist").join(file),
            swagger.join(file),
        )?;
    }
    Ok(())
}

/// The files of `swagger-ui-dist` that `src/api/swagger.rs` embeds.
const SWAGGER_UI_FILES: [&str; 2] = ["swagger-ui-bundle.js", "swagger-ui.css"];

fn run(cmd: &mut Command) -> BuildResult {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !status.success() {
        return Err(format!("{cmd:?} failed with {status}").into());
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> BuildResult {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "node_modules" || name == "dist" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
