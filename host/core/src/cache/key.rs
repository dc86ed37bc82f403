//! The secret that authenticates the cache's records, and where it lives.
//!
//! An artifact is native code that wasmtime runs as it loads it, so the
//! cache must load only bytes this user's own host compiled. A checkout can
//! write files into a home its project manifest names, and an owner-and-mode
//! check cannot tell those from the host's: so every record the cache reads
//! back (seal, alias, `.linked` mark, failure record, remembered
//! declaration) carries an HMAC-SHA256 made with a 32-byte key that lives
//! only in the user's own home (`cache.key`, mode 0600). A record whose MAC
//! does not verify under that key, or under its own file name, is treated
//! as absent: the entry is compiled again and overwritten, never loaded.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::home::DshHome;
use dsh_env_support::digest::hex;

/// The key file's name in its home.
pub(super) const KEY_FILE: &str = "cache.key";

/// How long a key is, in bytes.
const KEY_BYTES: usize = 32;

/// SHA-256's block size, the HMAC pad length.
const BLOCK_BYTES: usize = 64;

/// Where the secret that authenticates a cache's records is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheKey {
    /// `cache.key` in this directory, a home its user alone can write
    /// (created there, mode 0600, on first use).
    InHome(PathBuf),
    /// None: the cache is not used (every load compiles, nothing is written).
    Absent,
}

impl CacheKey {
    /// The key in `home`, which must be the user's own (not one a project
    /// manifest names: a checkout could put a key of its own there).
    pub fn in_home(home: &DshHome) -> Self {
        CacheKey::InHome(home.path().to_path_buf())
    }

    /// The secret, read from its home or created there; why not, if neither
    /// can be done safely.
    pub(super) fn load(&self) -> Result<Secret, String> {
        match self {
            CacheKey::InHome(home) => load_or_create(home),
            CacheKey::Absent => Err("no key to authenticate its entries (no user home)".into()),
        }
    }
}

/// A key read from `cache.key`.
pub(super) struct Secret([u8; KEY_BYTES]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// The record for `body` filed as `name`: the body, a newline, then the
    /// MAC of both in hex.
    pub(super) fn sign(&self, name: &str, body: &[u8]) -> Vec<u8> {
        let mut record = body.to_vec();
        record.push(b'\n');
        record.extend_from_slice(hex(&self.mac(name, body)).as_bytes());
        record
    }

    /// The body of `record`, if its MAC is this key's for `name`.
    pub(super) fn open<'r>(&self, name: &str, record: &'r [u8]) -> Option<&'r [u8]> {
        let split = record.iter().rposition(|&b| b == b'\n')?;
        let (body, tag) = (&record[..split], &record[split + 1..]);
        let expected = hex(&self.mac(name, body));
        // Constant time: a wrong MAC says nothing about where it differs.
        let same = tag.len() == expected.len()
            && (tag.iter().zip(expected.as_bytes())).fold(0, |acc, (a, b)| acc | (a ^ b)) == 0;
        same.then_some(body)
    }

    /// The MAC of a record's body under the name it is filed as (names
    /// hold no NUL, so the two never run together ambiguously).
    fn mac(&self, name: &str, body: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.0, &[name.as_bytes(), b"\0", body])
    }
}

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `key`, over the
/// `sha2` the host already uses for every digest.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; BLOCK_BYTES];
    if key.len() > BLOCK_BYTES {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let mut inner = Sha256::new().chain_update(pad(0x36));
    for part in parts {
        inner.update(part);
    }
    let inner = inner.finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// The key in `home`, created there if it has none. The home is created
/// (mode 0700) if missing, and must be a directory only this user (or
/// root) can write; the key must be a regular file of this user's, that
/// nobody else can read or write, of exactly [`KEY_BYTES`].
fn load_or_create(home: &Path) -> Result<Secret, String> {
    if !home.exists() {
        (fs::DirBuilder::new().recursive(true).mode(0o700))
            .create(home)
            .map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    }
    super::only_ours(home, true)?;
    let path = home.join(KEY_FILE);
    if let Some(secret) = read_key(&path)? {
        return Ok(secret);
    }
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key).map_err(|e| format!("cannot make a key: {e}"))?;
    // Written whole under a temporary name (mode 0600), then linked into
    // place only if no other process made one first: then that one is used,
    // so concurrent first runs agree on one key.
    let create = || -> std::io::Result<()> {
        let mut partial = tempfile::Builder::new()
            .prefix(".partial-")
            .tempfile_in(home)?;
        partial.write_all(&key)?;
        partial.as_file().sync_all()?;
        partial.persist_noclobber(&path).map_err(|e| e.error)?;
        Ok(())
    };
    match create() {
        Ok(()) => Ok(Secret(key)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_key(&path)?.ok_or_else(|| format!("{} vanished as it was made", path.display()))
        }
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

/// The key at `path`, `None` if there is no file; an error if there is one
/// that is not a sound key file (a link, another user's, readable by
/// others, or of the wrong size).
fn read_key(path: &Path) -> Result<Option<Secret>, String> {
    let shown = path.display();
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open {shown}: {e}")),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot inspect {shown}: {e}"))?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me {
        return Err(format!("{shown} is not a file of this user's"));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{shown} is open to its group or others (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    let mut bytes = Vec::with_capacity(KEY_BYTES + 1);
    (file.take(KEY_BYTES as u64 + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let key = <[u8; KEY_BYTES]>::try_from(bytes.as_slice())
        .map_err(|_| format!("{shown} is not a {KEY_BYTES}-byte key"))?;
    Ok(Some(Secret(key)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// RFC 4231, test cases 1 and 2.
    #[test]
    fn hmac_matches_the_rfc_vectors() {
        let one = hmac_sha256(&[0x0b; 20], &[b"Hi ", b"There"]);
        assert_eq!(
            hex(&one),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        let two = hmac_sha256(b"Jefe", &[b"what do ya want for nothing?"]);
        assert_eq!(
            hex(&two),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than a block is hashed first.
        let six = hmac_sha256(
            &[0xaa; 131],
            &[b"Test Using Larger Than Block-Size Key - Hash Key First"],
        );
        assert_eq!(
            hex(&six),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_record_opens_only_under_its_key_and_name() {
        let (secret, other) = (Secret([1; KEY_BYTES]), Secret([2; KEY_BYTES]));
        let record = secret.sign("a.seal", b"body");
        assert_eq!(secret.open("a.seal", &record), Some(&b"body"[..]));
        assert_eq!(secret.open("b.seal", &record), None);
        assert_eq!(other.open("a.seal", &record), None);
        let mut forged = record.clone();
        forged[0] ^= 1;
        assert_eq!(secret.open("a.seal", &forged), None);
        assert_eq!(secret.open("a.seal", b"body"), None);
        assert_eq!(secret.open("a.seal", b""), None);
    }

    #[test]
    fn the_key_is_made_once_private_and_refused_when_others_can_read_it() {
        let home = tempfile::tempdir().unwrap();
        let key = CacheKey::InHome(home.path().join("h"));
        let made = key.load().unwrap();
        let path = home.path().join("h").join(KEY_FILE);
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(key.load().unwrap().0, made.0, "the same key, read back");

        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(key.load().unwrap_err().contains("open to its group"));
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(home.path().join("elsewhere"), &path).unwrap();
        assert!(key.load().is_err(), "a link is not followed");
        fs::remove_file(&path).unwrap();
        fs::write(&path, b"short").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(key.load().unwrap_err().contains("32-byte key"));
        assert!(CacheKey::Absent.load().is_err());
    }
}
