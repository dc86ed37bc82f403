//! A JSON document edited as text: parsed only to know where each value
//! lies, then changed by splicing text in or out, so that every byte the
//! edit does not touch stays as it was (key order, indentation, numbers,
//! comments), and removing an inserted item gives back the very bytes that
//! were there before. serde_json's `Value` would re-serialize the whole file.

use serde_json::Value;

/// How deeply values may nest: deeper input is refused, not recursed into.
const MAX_DEPTH: usize = 128;

/// A value and where it lies in the text.
#[derive(Debug)]
pub(crate) struct Node {
    /// Its first byte.
    pub(crate) start: usize,
    /// One past its last byte.
    pub(crate) end: usize,
    /// What it is.
    pub(crate) kind: Kind,
}

/// What a value is, as far as edits need to know.
#[derive(Debug)]
pub(crate) enum Kind {
    /// An object's members, in order.
    Object(Vec<Member>),
    /// An array's elements, in order.
    Array(Vec<Node>),
    /// A string, decoded.
    String(String),
    /// A number, `true`, `false` or `null`.
    Other,
}

/// An object's member.
#[derive(Debug)]
pub(crate) struct Member {
    /// The key, decoded.
    pub(crate) key: String,
    /// Where the key's opening quote is.
    pub(crate) start: usize,
    /// The value.
    pub(crate) value: Node,
}

/// A change to the text: `text` in place of the bytes `start..end`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Splice {
    start: usize,
    end: usize,
    text: String,
}

impl Splice {
    /// `source` with the change made.
    pub(crate) fn apply(&self, source: &str) -> String {
        format!(
            "{}{}{}",
            &source[..self.start],
            self.text,
            &source[self.end..]
        )
    }
}

/// Parses `text`, with `//` and `/* */` comments as whitespace when
/// `comments` (JSONC, as Gemini CLI reads its settings). An error says what
/// is wrong and where (`… at line L column C`).
pub(crate) fn parse(text: &str, comments: bool) -> Result<Node, String> {
    if !comments {
        // serde_json's own message for what it refuses.
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| e.to_string())?;
    }
    let mut parser = Parser {
        text,
        at: 0,
        comments,
    };
    let root = parser.value(0)?;
    parser.skip_blank()?;
    if parser.at < text.len() {
        return Err(parser.error("trailing characters"));
    }
    Ok(root)
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    comments: bool,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> String {
        let before = &self.text[..self.at.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        format!("{what} at line {line} column {column}")
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Skips whitespace, and comments where they are allowed.
    fn skip_blank(&mut self) -> Result<(), String> {
        loop {
            let rest = &self.text[self.at..];
            if let Some(c) = rest.chars().next().filter(|c| " \t\r\n".contains(*c)) {
                self.at += c.len_utf8();
            } else if self.comments && rest.starts_with("//") {
                self.at += rest.find('\n').unwrap_or(rest.len());
            } else if self.comments && rest.starts_with("/*") {
                let Some(end) = rest[2..].find("*/") else {
                    return Err(self.error("unterminated comment"));
                };
                self.at += end + 4;
            } else {
                return Ok(());
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.skip_blank()?;
        let start = self.at;
        let kind = match self.peek() {
            Some(b'{') => Kind::Object(self.members(depth)?),
            Some(b'[') => Kind::Array(self.elements(depth)?),
            Some(b'"') => Kind::String(self.string()?),
            Some(b'-' | b'0'..=b'9') => {
                let len = self.text[start..]
                    .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
                    .unwrap_or(self.text.len() - start);
                self.at += len;
                match serde_json::from_str::<Value>(&self.text[start..self.at]) {
                    Ok(Value::Number(_)) => Kind::Other,
                    _ => return Err(self.error("invalid number")),
                }
            }
            _ => {
                let rest = &self.text[start..];
                let Some(word) = ["true", "false", "null"]
                    .into_iter()
                    .find(|word| rest.starts_with(word))
                else {
                    return Err(self.error("expected a value"));
                };
                self.at += word.len();
                Kind::Other
            }
        };
        Ok(Node {
            start,
            end: self.at,
            kind,
        })
    }

    /// A string at the cursor, decoded (serde_json decodes its escapes).
    fn string(&mut self) -> Result<String, String> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        let mut at = start + 1;
        while at < bytes.len() && bytes[at] != b'"' {
            at += if bytes[at] == b'\\' { 2 } else { 1 };
        }
        if at >= bytes.len() {
            return Err(self.error("unterminated string"));
        }
        self.at = at + 1;
        serde_json::from_str(&self.text[start..self.at]).map_err(|_| {
            self.at = start;
            self.error("invalid string")
        })
    }

    /// `{…}`'s members; the cursor is on `{`.
    fn members(&mut self, depth: usize) -> Result<Vec<Member>, String> {
        self.at += 1;
        let mut members = Vec::new();
        self.skip_blank()?;
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(members);
        }
        loop {
            self.skip_blank()?;
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a key"));
            }
            let start = self.at;
            let key = self.string()?;
            self.skip_blank()?;
            if self.peek() != Some(b':') {
                return Err(self.error("expected `:`"));
            }
            self.at += 1;
            let value = self.value(depth + 1)?;
            members.push(Member { key, start, value });
            self.skip_blank()?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(members);
                }
                _ => return Err(self.error("expected `,` or `}`")),
            }
        }
    }

    /// `[…]`'s elements; the cursor is on `[`.
    fn elements(&mut self, depth: usize) -> Result<Vec<Node>, String> {
        self.at += 1;
        let mut elements = Vec::new();
        self.skip_blank()?;
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(elements);
        }
        loop {
            elements.push(self.value(depth + 1)?);
            self.skip_blank()?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(elements);
                }
                _ => return Err(self.error("expected `,` or `]`")),
            }
        }
    }
}

impl Node {
    /// Its members, when it is an object.
    pub(crate) fn members(&self) -> Option<&[Member]> {
        match &self.kind {
            Kind::Object(members) => Some(members),
            _ => None,
        }
    }

    /// Its elements, when it is an array.
    pub(crate) fn elements(&self) -> Option<&[Node]> {
        match &self.kind {
            Kind::Array(elements) => Some(elements),
            _ => None,
        }
    }

    /// The member `key` (the last, as JSON parsers take it), with its index.
    pub(crate) fn member(&self, key: &str) -> Option<(usize, &Member)> {
        (self.members()?.iter().enumerate())
            .rev()
            .find(|(_, member)| member.key == key)
    }

    /// Its text, when it is a string.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::String(text) => Some(text),
            _ => None,
        }
    }

    /// Each item's span: a member from its key, an element as it is.
    fn items(&self) -> Vec<(usize, usize)> {
        match &self.kind {
            Kind::Object(members) => (members.iter())
                .map(|member| (member.start, member.value.end))
                .collect(),
            Kind::Array(elements) => elements.iter().map(|node| (node.start, node.end)).collect(),
            _ => Vec::new(),
        }
    }

    /// Adds a member `key: value` at the end of this object.
    pub(crate) fn insert_member(&self, source: &str, key: &str, value: &Value) -> Splice {
        self.append(source, |indent| {
            format!("{}: {}", Value::from(key), render(value, indent))
        })
    }

    /// Adds `value` at the end of this array.
    pub(crate) fn push_element(&self, source: &str, value: &Value) -> Splice {
        self.append(source, |indent| render(value, indent))
    }

    /// Adds the item `item(indent)` after the last, laid out as the items
    /// already there are (on lines of their own or on one line), or on a
    /// line of its own in an empty container.
    fn append(&self, source: &str, item: impl Fn(&str) -> String) -> Splice {
        let items = self.items();
        let Some(&(first, _)) = items.first() else {
            let outer = line_indent(source, self.start);
            let inner = format!("{outer}  ");
            let interior = &source[self.start + 1..self.end - 1];
            // Blank space inside goes; a comment stays.
            let start = if interior.trim().is_empty() {
                self.start + 1
            } else {
                self.end - 1
            };
            return Splice {
                start,
                end: self.end - 1,
                text: format!("\n{inner}{}\n{outer}", item(&inner)),
            };
        };
        let gap = &source[self.start + 1..first];
        let (separator, indent) = match gap.rfind('\n') {
            Some(at) => {
                let indent: String = gap[at + 1..]
                    .chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .collect();
                (format!("\n{indent}"), indent)
            }
            None => (" ".to_string(), String::new()),
        };
        let last = items[items.len() - 1].1;
        Splice {
            start: last,
            end: last,
            text: format!(",{separator}{}", item(&indent)),
        }
    }

    /// Removes item `index` with the separator before it (after it, for the
    /// first): the inverse of [`Node::insert_member`] and
    /// [`Node::push_element`], byte for byte.
    pub(crate) fn remove_item(&self, index: usize) -> Splice {
        let items = self.items();
        let (start, end) = match index {
            0 if items.len() > 1 => (items[0].0, items[1].0),
            0 => (self.start + 1, self.end - 1),
            _ => (items[index - 1].1, items[index].1),
        };
        Splice {
            start,
            end,
            text: String::new(),
        }
    }

    /// Replaces this value with `value`.
    pub(crate) fn replace(&self, value: &Value) -> Splice {
        Splice {
            start: self.start,
            end: self.end,
            text: value.to_string(),
        }
    }
}

/// `value` pretty-printed, its lines after the first indented by `indent`.
/// Without an indent (a container laid out on one line), on one line.
fn render(value: &Value, indent: &str) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    pretty.replace('\n', &format!("\n{indent}"))
}

/// The indentation of the line holding byte `at`.
fn line_indent(source: &str, at: usize) -> String {
    let line_start = source[..at].rfind('\n').map_or(0, |i| i + 1);
    source[line_start..at]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_inserted_item_lands_in_the_layout_and_its_removal_restores_the_bytes() {
        let sources = [
            "{\n    \"model\": \"x\",\n    \"n\": 1.50\n}\n",
            "{\"a\":[1,2]}",
            "{}",
            "{\n}\n",
        ];
        for source in sources {
            let root = parse(source, false).unwrap();
            let added = root
                .insert_member(source, "hooks", &json!({"E": [1]}))
                .apply(source);
            let parsed: Value = serde_json::from_str(&added).unwrap();
            assert_eq!(parsed["hooks"], json!({"E": [1]}), "{added}");
            let root = parse(&added, false).unwrap();
            let (index, _) = root.member("hooks").unwrap();
            let removed = root.remove_item(index).apply(&added);
            if root.members().unwrap().len() > 1 {
                assert_eq!(removed, source);
            }
        }
        let source = "{\n  \"a\": 1\n}";
        let root = parse(source, false).unwrap();
        assert_eq!(
            root.insert_member(source, "b", &json!([true]))
                .apply(source),
            "{\n  \"a\": 1,\n  \"b\": [\n    true\n  ]\n}"
        );
    }

    #[test]
    fn comments_are_blank_only_where_allowed_and_errors_say_where() {
        let source = "{\n  // mine\n  \"a\": /* x */ [1]\n}";
        assert!(parse(source, false).is_err());
        let root = parse(source, true).unwrap();
        let (_, member) = root.member("a").unwrap();
        assert_eq!(member.value.elements().unwrap().len(), 1);
        assert_eq!(
            parse("{\n  \"a\": tru\n}", true).unwrap_err(),
            "expected a value at line 2 column 8"
        );
        assert!(
            parse(&"[".repeat(1000), true)
                .unwrap_err()
                .contains("nested too deeply")
        );
    }
}
