//! Where the tests find the interpreters and tools the README's test
//! command installs: Python packages live in a virtual environment of the
//! project's (`target/test-venv`, made by `.ci/test` from
//! `tests/requirements.txt`), never in the system interpreter.

use std::path::PathBuf;

/// The project's test virtual environment.
pub fn venv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv")
}

/// The Python interpreter the tests run: the test venv's when it exists
/// (`LMOS_TEST_PYTHON` overrides), else `python3` from the PATH.
pub fn python() -> String {
    if let Ok(p) = std::env::var("LMOS_TEST_PYTHON") {
        return p;
    }
    let venv = venv().join("bin/python3");
    if venv.exists() {
        return venv.to_string_lossy().into_owned();
    }
    "python3".into()
}
