//! The credentials this process holds, and the one place that blanks them
//! out of text: every registry text an error quotes, every error this crate
//! returns, and (in the CLI) every log line and error it prints.
//!
//! A registry or token endpoint answers with whatever it likes, so it can
//! repeat what it was sent: the password in the clear, the Basic header's
//! base64 of `user:password`, either URL-encoded or JSON-escaped, or the
//! bearer token it issued. Each of those forms is held and blanked, before
//! a text is cut to an excerpt (a cut would otherwise leave the start of a
//! secret). Held for the life of the process: a secret once read (an auth
//! file, a credential helper, `login`'s stdin) or received (a token) is
//! never shown by anything written later either.

use std::borrow::Cow;
use std::sync::{PoisonError, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use dsh_env::__internal::escape_controls;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::Credential;

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// The characters a URL carries as they are (RFC 3986's unreserved).
const URL_KEPT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

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
/// (the longest match first, in one pass).
pub fn redact(text: &str) -> Cow<'_, str> {
    let held = HELD.read().unwrap_or_else(PoisonError::into_inner);
    let matcher = match &held.matcher {
        None => return Cow::Borrowed(text),
        Some(Ok(matcher)) => matcher,
        Some(Err(())) => return Cow::Borrowed(REDACTED),
    };
    if !matcher.is_match(text) {
        return Cow::Borrowed(text);
    }
    let mut blanked = String::with_capacity(text.len());
    let replaced = matcher.try_replace_all_with(text, &mut blanked, |_, _, out| {
        out.push_str(REDACTED);
        true
    });
    match replaced {
        Ok(()) => Cow::Owned(blanked),
        Err(_) => Cow::Borrowed(REDACTED),
    }
}

/// `secret` as it is, URL-encoded (`%20` and `+` for a space, either hex
/// case), JSON-escaped, control-escaped (as messages show it), and in
/// base64; none for an empty one.
fn forms(secret: &str) -> Vec<String> {
    if secret.is_empty() {
        return Vec::new();
    }
    let encoded = utf8_percent_encode(secret, URL_KEPT).to_string();
    let json = serde_json::to_string(secret).expect("a string serializes");
    let mut forms = vec![
        secret.to_string(),
        encoded.replace("%20", "+"),
        lower_hex_escapes(&encoded),
        encoded,
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

/// `encoded` with each `%XX` escape's hex digits in lower case.
fn lower_hex_escapes(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut hex_left = 0;
    for c in encoded.chars() {
        if hex_left > 0 {
            out.push(c.to_ascii_lowercase());
            hex_left -= 1;
        } else {
            out.push(c);
            if c == '%' {
                hex_left = 2;
            }
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_a_held_secret_is_blanked_and_nothing_else() {
        let secret = "Unit-test p@ss/w0rd+";
        hold_credential(&Credential {
            username: "unit".into(),
            secret: secret.into(),
            source: "a test".into(),
        });
        let basic = STANDARD_NO_PAD.encode(format!("unit:{secret}"));
        for shown in [
            secret.to_string(),
            basic.clone(),
            format!("{basic}=="),
            "Unit-test%20p%40ss%2Fw0rd%2B".into(),
            "Unit-test+p%40ss%2Fw0rd%2B".into(),
            "Unit-test%20p%40ss%2fw0rd%2b".into(),
            STANDARD_NO_PAD.encode(secret),
        ] {
            let text = format!("before {shown} after");
            let blanked = redact(&text);
            assert!(
                blanked.starts_with("before <redacted>") && !blanked.contains("w0rd"),
                "{text} -> {blanked}"
            );
        }
        assert_eq!(redact("Unit-test p@ss"), "Unit-test p@ss");
    }
}
