//! What errand creates is private to its owner (umask 077), as the docs promise for the data directory; a file the user asks for elsewhere (`results download --out`) gets the mode the caller's own umask gives it.

use std::fs::{File, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;

use nix::sys::stat::{Mode, umask};

/// The umask the process started with, once [`make_private`] replaced it.
static CALLER_UMASK: OnceLock<u32> = OnceLock::new();

/// From now on, every file and directory this process (and what it starts) creates is its
/// owner's only: files 0600, directories 0700.
pub fn make_private() {
    let caller = umask(Mode::from_bits_truncate(0o077));
    let _ = CALLER_UMASK.set(caller.bits());
}

/// Creates (or truncates) `path`, a file the user asked for, with the mode the caller's umask
/// gives a new file (0644 under the usual 022).
pub fn create_user_file(path: &Path) -> std::io::Result<File> {
    let file = File::create(path)?;
    if let Some(caller) = CALLER_UMASK.get() {
        file.set_permissions(Permissions::from_mode(0o666 & !caller))?;
    }
    Ok(file)
}
