//! Who is running: the binary's name (hints say `worker migrate`, not `mysqlq-cli migrate`, in an
//! application's own binary), and the line that links an application's jobs into it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The name of the standalone binary, used in messages until [`set_name`] is called.
pub(crate) const DEFAULT_NAME: &str = "mysqlq-cli";

static NAME: OnceLock<String> = OnceLock::new();

/// Records the program name from `argv[0]` (its file name).
pub(crate) fn set_name(argv0: Option<&std::ffi::OsStr>) {
    let name = argv0
        .map(Path::new)
        .and_then(Path::file_stem)
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_NAME);
    let _ = NAME.set(name.to_owned());
}

/// The binary's name, e.g. `worker` or `mysqlq-cli`.
pub(crate) fn name() -> &'static str {
    NAME.get().map_or(DEFAULT_NAME, String::as_str)
}

/// `text` with every `` `mysqlq-cli `` command hint renamed to this binary.
pub(crate) fn rename(text: &str) -> String {
    let name = name();
    if name == DEFAULT_NAME {
        return text.to_owned();
    }
    text.replace(&format!("`{DEFAULT_NAME} "), &format!("`{name} "))
}

/// The source file that called `mysqlq_cli::main()` / `Cli::new()` (from `#[track_caller]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    pub(crate) file: &'static str,
}

/// What to tell the user whose binary links no jobs: the one line to add, and where.
pub(crate) fn no_jobs_fix(caller: Option<Caller>) -> String {
    let name = name();
    if name == DEFAULT_NAME {
        return format!(
            "the standalone {DEFAULT_NAME} links no jobs: run `work` from your application's \
             worker binary, e.g. src/bin/worker.rs containing `use my_app as _; fn main() {{ \
             mysqlq_cli::main() }}` (my_app: your library crate with the #[job]s)"
        );
    }
    let file = caller.map(|c| c.file);
    let lib = file.and_then(|f| library_of(f, &search_bases()));
    let line = format!(
        "use {} as _;",
        lib.as_deref().unwrap_or("your_library_crate")
    );
    let place = file.map_or_else(
        || "to the file with this binary's `fn main`".to_owned(),
        |f| format!("to {f}"),
    );
    let which = if lib.is_some() {
        "your #[job]s are in the library crate, which this binary never refers to, so the linker \
         dropped them"
    } else {
        "if your #[job]s are in a library crate, this binary never refers to it, so the linker \
         dropped them"
    };
    format!("{which}: add `{line}` {place}")
}

/// Directories a relative source path (as rustc recorded it) may be relative to: the package
/// `cargo run` runs, the current directory, and the directories above the executable (which
/// usually sits in `<project>/target/<profile>/`).
fn search_bases() -> Vec<PathBuf> {
    let mut bases = Vec::new();
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        bases.push(PathBuf::from(dir));
    }
    if let Ok(dir) = std::env::current_dir() {
        bases.push(dir);
    }
    if let Ok(exe) = std::env::current_exe() {
        bases.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    bases
}

/// The library crate name of the package holding `source` (a path such as `src/bin/worker.rs`,
/// relative to one of `bases` or absolute), or `None` when the package has no library.
pub(crate) fn library_of(source: &str, bases: &[PathBuf]) -> Option<String> {
    let source = Path::new(source);
    // The package directory is what comes before the last `src` component.
    let comps: Vec<_> = source.components().collect();
    let src_at = comps.iter().rposition(|c| c.as_os_str() == "src")?;
    let package: PathBuf = comps[..src_at].iter().collect();
    let candidates: Vec<PathBuf> = if source.is_absolute() {
        vec![package]
    } else {
        bases
            .iter()
            .filter(|b| b.join(source).is_file())
            .map(|b| b.join(&package))
            .collect()
    };
    candidates.iter().find_map(|dir| {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
        lib_name(&manifest, dir.join("src/lib.rs").is_file())
    })
}

/// The library crate name declared by a `Cargo.toml`: `[lib] name`, else the package name with
/// `-` as `_`; `None` without a `[lib]` section or `src/lib.rs`.
pub(crate) fn lib_name(manifest: &str, has_lib_rs: bool) -> Option<String> {
    let mut section = String::new();
    let mut package = None;
    let mut lib = None;
    let mut has_lib_section = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']).trim().to_owned();
            has_lib_section |= section == "lib";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() != "name" {
            continue;
        }
        let value = value.trim().trim_matches('"').to_owned();
        match section.as_str() {
            "package" => package = Some(value),
            "lib" => lib = Some(value),
            _ => {}
        }
    }
    if !has_lib_rs && !has_lib_section {
        return None;
    }
    lib.or(package).map(|n| n.replace('-', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names_come_from_the_manifest() {
        let m =
            "[package]\nname = \"my-app\"\nversion = \"0.1.0\"\n\n[dependencies]\nname = \"x\"\n";
        assert_eq!(lib_name(m, true).as_deref(), Some("my_app"));
        assert_eq!(lib_name(m, false), None);
        let m = "[package]\nname = \"my-app\"\n[lib]\nname = \"core_jobs\"\npath = \"jobs.rs\"\n";
        assert_eq!(lib_name(m, false).as_deref(), Some("core_jobs"));
    }

    #[test]
    fn the_package_is_found_from_the_binarys_source_file() {
        let dir = std::env::temp_dir().join(format!("mysqlq-cli-program-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("app/src/bin")).unwrap();
        std::fs::write(
            dir.join("app/Cargo.toml"),
            "[package]\nname = \"shop-app\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("app/src/lib.rs"), "").unwrap();
        std::fs::write(dir.join("app/src/bin/worker.rs"), "").unwrap();
        let found = library_of(
            "app/src/bin/worker.rs",
            &[PathBuf::from("/nonexistent"), dir.clone()],
        );
        assert_eq!(found.as_deref(), Some("shop_app"));
        let abs = dir.join("app/src/bin/worker.rs");
        assert_eq!(
            library_of(abs.to_str().unwrap(), &[]).as_deref(),
            Some("shop_app")
        );
        assert_eq!(library_of("app/src/bin/worker.rs", &[]), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
