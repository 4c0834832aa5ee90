//! The committed C header is the one cbindgen generates from the source.

use std::path::Path;

#[test]
fn the_committed_header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/simba_lease.h");
    if std::env::var_os("SIMBA_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "capi/include/simba_lease.h is not what cbindgen generates from capi/src/; \
         regenerate it with `SIMBA_BLESS_HEADER=1 cargo test -p simba-lease-capi --test header` \
         and commit it"
    );
}
