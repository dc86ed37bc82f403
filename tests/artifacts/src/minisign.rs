//! Minisign keys for the tests that sign components: made and used by
//! Debian's real `minisign` (installed by `scripts/setup-polyglot`), as an
//! author makes and uses them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The trusted comment [`SigningKey::sign`] writes.
pub const TRUSTED_COMMENT: &str = "release 1.0";

/// A minisign key pair, without a password.
pub struct SigningKey {
    secret: PathBuf,
    /// The base64 line of the `.pub` file: what `[trust] keys` holds.
    pub public: String,
    /// The key id, as minisign prints it (uppercase hex).
    pub id: String,
    /// The key id bytes its signatures are rewritten to name, when the key
    /// claims another key's id ([`SigningKey::claiming_the_id_of`]).
    claimed: Option<[u8; 8]>,
}

impl SigningKey {
    /// Makes a key pair `<dir>/<name>.pub` and `<dir>/<name>.key`.
    pub fn new(dir: &Path, name: &str) -> Self {
        let (public, secret) = (
            dir.join(format!("{name}.pub")),
            dir.join(format!("{name}.key")),
        );
        let status = Command::new("minisign")
            .args(["-G", "-W", "-f", "-p"])
            .arg(&public)
            .arg("-s")
            .arg(&secret)
            .stdout(Stdio::null())
            .status()
            .expect("minisign is installed by scripts/setup-polyglot");
        assert!(status.success());
        let text = std::fs::read_to_string(&public).unwrap();
        let id = text.lines().next().unwrap().rsplit(' ').next().unwrap();
        SigningKey {
            secret,
            public: text.lines().nth(1).unwrap().to_string(),
            id: id.to_string(),
            claimed: None,
        }
    }

    /// Signs `file` with the trusted comment [`TRUSTED_COMMENT`], writing
    /// `<file>.minisig`.
    pub fn sign(&self, file: &Path) {
        self.sign_with_comment(file, TRUSTED_COMMENT);
    }

    /// Signs `file` with `comment` as its trusted comment.
    pub fn sign_with_comment(&self, file: &Path, comment: &str) {
        let status = Command::new("minisign")
            .args(["-S", "-s"])
            .arg(&self.secret)
            .arg("-m")
            .arg(file)
            .args(["-t", comment])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        if let Some(id) = self.claimed {
            // The key id is not signed: anyone can write any id there.
            let path = signature_path(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines[1] = with_key_id(&lines[1], id);
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        }
    }

    /// Whether the real `minisign -V` verifies `file`'s signature under this
    /// public key.
    pub fn verifies(&self, file: &Path) -> bool {
        Command::new("minisign")
            .args(["-V", "-q", "-P", &self.public, "-m"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    /// The same key pair, made to carry `other`'s key id, as whoever makes a
    /// key may choose its id: its public key and every signature it makes
    /// name that id (the key id is bytes 2..10 of both, and covered by
    /// neither's signature).
    pub fn claiming_the_id_of(mut self, other: &SigningKey) -> Self {
        let bytes = STANDARD.decode(&other.public).unwrap();
        let id: [u8; 8] = bytes[2..10].try_into().unwrap();
        self.public = with_key_id(&self.public, id);
        self.id = other.id.clone();
        self.claimed = Some(id);
        self
    }
}

/// Where minisign writes `file`'s signature.
fn signature_path(file: &Path) -> PathBuf {
    let mut path = file.as_os_str().to_owned();
    path.push(".minisig");
    PathBuf::from(path)
}

/// A base64 key or signature line, its key id (bytes 2..10) replaced by `id`.
fn with_key_id(line: &str, id: [u8; 8]) -> String {
    let mut bytes = STANDARD.decode(line.trim()).unwrap();
    bytes[2..10].copy_from_slice(&id);
    STANDARD.encode(bytes)
}
