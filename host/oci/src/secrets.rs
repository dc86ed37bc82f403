//! The credentials this process holds, and the one place that blanks them
//! out of text: every registry text an error quotes, every error this crate
//! returns, and (in the CLI) every log line and error it prints.
//!
//! A registry or token endpoint answers with whatever it likes, so it can
//! repeat what it was sent: the password in the clear, the Basic header's
//! base64 of `user:password`, either JSON-escaped or URL-encoded (wholly or
//! in part, as the url crate leaves a URL a server sent), or the bearer
//! token it issued. Each of those is blanked, before a text is cut to an
//! excerpt (a cut would otherwise leave the start of a secret). Held for the life of the process: a secret once read (an auth
//! file, a credential helper, `login`'s stdin) or received (a token) is
//! never shown by anything written later either.

use std::borrow::Cow;
use std::sync::{PoisonError, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use dsh_env_support::input::escape_controls;
use percent_encoding::percent_decode_str;

use crate::Credential;

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Every form of every secret held, and the matcher built from them.
struct Held {
    forms: Vec<String>,
    /// `None` while nothing is held; `Err` if the matcher could not be
    /// built, and then every text is blanked whole.
    matcher: Option<Result<AhoCorasick, ()>>,
}

static HELD: RwLock<Held> = RwLock::new(Held {
    forms: Vec::new(),
    matcher: None,
});

/// Holds `credential`'s secret for redaction, in each form a server could
/// repeat it in: alone, and as `user:secret` in base64 (the Basic header).
pub fn hold_credential(credential: &Credential) {
    let mut forms = forms(&credential.secret);
    if !credential.secret.is_empty() {
        let basic = format!("{}:{}", credential.username, credential.secret);
        forms.extend(base64_forms(basic.as_bytes()));
    }
    add(forms);
}

/// Holds `secret` (a bearer token, say) for redaction, in each form a
/// server could repeat it in. An empty one is ignored.
pub fn hold(secret: &str) {
    add(forms(secret));
}

/// `text` with every form of every secret held replaced by [`REDACTED`]
/// (the longest match first, in one pass). A secret URL-encoded, wholly or
/// in part, `+` for a space or not, is found in the text percent-decoded,
/// which is then what is returned.
pub fn redact(text: &str) -> Cow<'_, str> {
    let held = HELD.read().unwrap_or_else(PoisonError::into_inner);
    let matcher = match &held.matcher {
        None => return Cow::Borrowed(text),
        Some(Ok(matcher)) => matcher,
        Some(Err(())) => return Cow::Borrowed(REDACTED),
    };
    let mut shown = blank(matcher, text).map_or(Cow::Borrowed(text), Cow::Owned);
    for plus_is_space in [false, true] {
        let view = match plus_is_space {
            false if shown.contains('%') => shown.to_string(),
            true if shown.contains(['%', '+']) => shown.replace('+', " "),
            _ => continue,
        };
        if let Some(blanked) = blank(matcher, &percent_decode_str(&view).decode_utf8_lossy()) {
            shown = Cow::Owned(blanked);
        }
    }
    shown
}

/// `text` with every match of `matcher` replaced by [`REDACTED`], or
/// `None` when nothing matches.
fn blank(matcher: &AhoCorasick, text: &str) -> Option<String> {
    if !matcher.is_match(text) {
        return None;
    }
    let mut blanked = String::with_capacity(text.len());
    let replaced = matcher.try_replace_all_with(text, &mut blanked, |_, _, out| {
        out.push_str(REDACTED);
        true
    });
    Some(replaced.map_or_else(|_| REDACTED.to_string(), |()| blanked))
}

/// `secret` as it is, JSON-escaped, control-escaped (as messages show it),
/// and in base64; none for an empty one.
fn forms(secret: &str) -> Vec<String> {
    if secret.is_empty() {
        return Vec::new();
    }
    let json = serde_json::to_string(secret).expect("a string serializes");
    let mut forms = vec![
        secret.to_string(),
        json[1..json.len() - 1].to_string(),
        escape_controls(secret).into_owned(),
    ];
    forms.extend(base64_forms(secret.as_bytes()));
    forms
}

/// `bytes` in standard and URL-safe base64: whole (unpadded), and the part
/// that ends on a 3-byte boundary, whose characters stay the same whatever
/// follows the bytes in a longer encoded text.
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    let aligned = &bytes[..bytes.len() / 3 * 3];
    [STANDARD_NO_PAD, URL_SAFE_NO_PAD]
        .iter()
        .flat_map(|engine| [engine.encode(bytes), engine.encode(aligned)])
        .collect()
}

/// Adds `forms` to what is held, and builds the matcher anew.
fn add(forms: Vec<String>) {
    let mut held = HELD.write().unwrap_or_else(PoisonError::into_inner);
    let before = held.forms.len();
    for form in forms {
        if !form.is_empty() && !held.forms.contains(&form) {
            held.forms.push(form);
        }
    }
    if held.forms.len() == before {
        return;
    }
    let matcher = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&held.forms)
        .map_err(|_| ());
    held.matcher = Some(matcher);
}
