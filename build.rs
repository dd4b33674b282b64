//! Records the git revision the binary is built from (shown in `summary.json`) and, with the
//! `tch` feature, writes libtorch's directory into the binaries' run path, so that they start
//! without LD_LIBRARY_PATH.

fn main() {
    let rev = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=RESILAB_GIT_REVISION={rev}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    // An edit anywhere in the sources makes the tree dirty: cargo scans these directories, so
    // the recorded revision never names a commit the binary's code differs from.
    for path in ["src", "crates", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={path}");
    }
    // A commit moves the branch's ref, which `.git/HEAD` only names: watch that file too (and
    // packed refs), where they exist (a missing path would rerun this script on every build).
    let head = std::fs::read_to_string(".git/HEAD").unwrap_or_default();
    let current = head.strip_prefix("ref: ").map(|r| format!(".git/{}", r.trim()));
    for path in current.into_iter().chain([".git/packed-refs".to_string()]) {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // torch-sys (`links = "tch"`) passes its libtorch directory to direct dependents.
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
