//! What commands print in common: the `--json` envelope and sizes.

/// The version of every `--json` shape, carried as its top-level
/// `"format"`: raised when a shape changes in a way a reader could trip on
/// (a field removed, renamed or given another meaning), not when one is added.
pub(crate) const JSON_FORMAT: u32 = 1;

/// Prints the JSON object `value` on stdout, pretty, with `"format"`
/// ([`JSON_FORMAT`]) added.
pub(crate) fn print_json(mut value: serde_json::Value) {
    if let Some(object) = value.as_object_mut() {
        object.insert("format".into(), JSON_FORMAT.into());
    }
    match serde_json::to_string_pretty(&value) {
        Ok(text) => println!("{text}"),
        Err(err) => eprintln!("dsh-env: cannot print JSON: {err}"),
    }
}

/// `bytes` in KiB or MiB, to one decimal.
pub(crate) fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}
