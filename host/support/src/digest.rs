//! SHA-256 as the host uses it: one lowercase-hex digest and one check of
//! bytes against an expected digest, shared by manifest pins, the store, the
//! artifact cache and the OCI client, so every place compares the same way.

use sha2::{Digest, Sha256};

/// The SHA-256 of `bytes`, in lowercase hex: the content digest the cache
/// files a component under, and the digest a manifest entry pins.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// 64 lowercase hexadecimal digits.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Bytes whose SHA-256 is not the one expected; each caller names them in
/// its own error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The digest of the bytes found, lowercase hex.
    pub actual: String,
}

/// Checks that the SHA-256 of `bytes` is `expected` (lowercase hex).
pub fn verify(bytes: &[u8], expected: &str) -> Result<(), Mismatch> {
    let actual = sha256_hex(bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(Mismatch { actual })
    }
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_against_the_lowercase_digest() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(sha256_hex(b""), empty);
        assert!(is_sha256_hex(empty));
        assert!(!is_sha256_hex(&empty.to_uppercase()));
        assert_eq!(verify(b"", empty), Ok(()));
        assert_eq!(
            verify(b"x", empty),
            Err(Mismatch {
                actual: sha256_hex(b"x")
            })
        );
    }
}
