//! libFuzzer over the unpacker: whatever the bytes (a `tar.gz` or not), extraction returns, writes nothing outside its root and ends in bounded time.
#![no_main]

use errand::archive::Selection;
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/hostile.rs"]
mod hostile;

fuzz_target!(|data: &[u8]| {
    // The first byte picks how the rest is extracted: whole, or one subpath at a mount path.
    let Some((&pick, archive)) = data.split_first() else {
        return;
    };
    let selection = match pick % 3 {
        0 => Selection::default(),
        1 => Selection::new(Some("a"), Some("mnt")).unwrap(),
        _ => Selection::new(None, Some("a/b")).unwrap(),
    };
    hostile::extract_and_check(archive, &selection);
});
