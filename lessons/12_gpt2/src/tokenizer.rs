//! GPT-2's tokenizer: byte-level BPE, read from the checkpoint's `vocab.json` and `merges.txt`.
//!
//! Text becomes tokens in three steps:
//!
//! 1. **Pre-tokenize**: cut the text into pieces (words with their leading space, runs of
//!    digits, runs of punctuation, whitespace) with GPT-2's pattern ([`pre_tokenize`]). Merges
//!    never cross a piece's border.
//! 2. **Bytes to symbols**: each piece's UTF-8 bytes become one symbol each, written as
//!    printable characters ([`byte_chars`]: `' '` is written `Ġ`, `'\n'` is `Ċ`), so that any
//!    byte string, valid UTF-8 or not, has tokens.
//! 3. **Merge**: repeatedly join the adjacent pair that `merges.txt` lists first, until no
//!    listed pair is left; each remaining symbol is a token of `vocab.json` ([`Tokenizer::bpe`]).
//!
//! Decoding reverses step 2 and joins the bytes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use crate::ModelError;

/// GPT-2's vocabulary and merges.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    /// Token text (in [`byte_chars`]) to id, from `vocab.json`.
    ids: HashMap<String, u32>,
    /// Id to token text.
    tokens: Vec<String>,
    /// A pair's rank: its line in `merges.txt`; lower merges first.
    ranks: HashMap<(String, String), usize>,
    /// Tokens matched as whole strings before pre-tokenizing (`<|endoftext|>`).
    special: Vec<(String, u32)>,
    /// [`byte_chars`], and its inverse.
    byte_char: [char; 256],
    char_byte: HashMap<char, u8>,
}

/// The tokens GPT-2 matches as whole strings in text.
const SPECIAL_TOKENS: [&str; 1] = ["<|endoftext|>"];

// ANCHOR: byte_chars
/// GPT-2's table from each byte to a printable character: the printable Latin-1 bytes stand
/// for themselves; the other 68 (controls, space, ...) are written as characters from U+0100
/// on, in byte order (`' '`, 0x20, becomes `Ġ`, U+0120).
pub fn byte_chars() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for byte in 0..=255u8 {
        table[byte as usize] = if printable(byte) {
            char::from(byte)
        } else {
            next += 1;
            char::from_u32(next - 1).expect("U+0100 to U+0143 are characters")
        };
    }
    table
}
// ANCHOR_END: byte_chars

// ANCHOR: pre_tokenize
/// Cuts `text` into the pieces GPT-2's pattern finds, in order; together they are the text.
///
/// The pattern is `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:
/// at each position, the first of these that matches is the next piece:
///
/// - a contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`);
/// - a run of letters, of digits, or of other non-space characters, with one space before it
///   if there is one (so `" world"` is one piece);
/// - a run of whitespace, less its last character if a non-space follows (that character
///   then starts the next piece: the space in front of a word belongs to the word).
pub fn pre_tokenize(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let byte_at = |i: usize| chars.get(i).map_or(text.len(), |&(at, _)| at);
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let end = piece_end(&chars, start);
        pieces.push(&text[byte_at(start)..byte_at(end)]);
        start = end;
    }
    pieces
}

/// Where the piece that starts at `chars[start]` ends (an index into `chars`).
fn piece_end(chars: &[(usize, char)], start: usize) -> usize {
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let run = |from: usize, class: fn(char) -> bool| {
        (from..chars.len()).find(|&i| !class(chars[i].1)).unwrap_or(chars.len())
    };
    if at(start) == Some('\'') {
        let next = (at(start + 1), at(start + 2));
        match next {
            (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => {
                return start + 3;
            }
            (Some('s' | 't' | 'm' | 'd'), _) => return start + 2,
            _ => {}
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of a class.
    let body = if at(start) == Some(' ') { start + 1 } else { start };
    if let Some(first) = at(body) {
        for class in [is_letter, is_number, is_other] {
            if class(first) {
                return run(body, class);
            }
        }
    }
    // `\s+(?!\S)|\s+`: whitespace, leaving the last space for a word that follows.
    let end = run(start, char::is_whitespace);
    if end < chars.len() && end - start >= 2 { end - 1 } else { end }
}

/// `\p{L}`: Unicode's letters (general category L), from the regex crates' tables.
fn is_letter(c: char) -> bool {
    static LETTERS: OnceLock<Vec<(char, char)>> = OnceLock::new();
    let ranges = LETTERS.get_or_init(|| {
        use regex_syntax::hir::{Class, HirKind};
        let hir = regex_syntax::Parser::new().parse(r"\p{L}").expect("a valid class");
        match hir.kind() {
            HirKind::Class(Class::Unicode(class)) => {
                class.ranges().iter().map(|r| (r.start(), r.end())).collect()
            }
            other => unreachable!("\\p{{L}} parsed as {other:?}"),
        }
    });
    // The ranges are sorted and disjoint: find the last that starts at or before `c`.
    let after = ranges.partition_point(|&(start, _)| start <= c);
    after > 0 && c <= ranges[after - 1].1
}

/// `\p{N}`: Unicode's numbers (general categories Nd, Nl and No), as `char::is_numeric`.
fn is_number(c: char) -> bool {
    c.is_numeric()
}

/// `[^\s\p{L}\p{N}]`: anything else that is not whitespace.
fn is_other(c: char) -> bool {
    !c.is_whitespace() && !is_letter(c) && !is_number(c)
}
// ANCHOR_END: pre_tokenize

impl Tokenizer {
    /// Reads `vocab.json` and `merges.txt` from a checkpoint's folder.
    pub fn from_folder(folder: &Path) -> Result<Self, ModelError> {
        let read = |name: &str| {
            let path = folder.join(name);
            std::fs::read_to_string(&path).map_err(|error| ModelError::io(&path, error))
        };
        Self::from_strings(&read("vocab.json")?, &read("merges.txt")?)
    }

    /// The tokenizer of a `vocab.json` (token text to id) and a `merges.txt` (a `#version`
    /// line, then one pair per line, in merge order). Errors: invalid JSON, ids that are not
    /// `0..V` once each, a byte with no token, a merge line that is not two tokens, or a merge
    /// whose result is not in the vocabulary.
    pub fn from_strings(vocab_json: &str, merges_txt: &str) -> Result<Self, ModelError> {
        let vocab: HashMap<String, Value> = serde_json::from_str(vocab_json).map_err(|error| {
            ModelError::checkpoint("vocab.json", format!("{error}"), "a JSON object of token ids")
        })?;
        let mut tokens = vec![None; vocab.len()];
        let mut ids = HashMap::with_capacity(vocab.len());
        for (token, id) in vocab {
            let slot = id.as_u64().and_then(|id| tokens.get_mut(id as usize));
            match slot {
                Some(slot @ None) => *slot = Some(token.clone()),
                _ => {
                    return Err(ModelError::checkpoint(
                        format!("vocab.json: token {token:?}"),
                        format!("id {id}, out of range or taken twice"),
                        format!("the ids 0..{} once each", tokens.len()),
                    ));
                }
            }
            ids.insert(token, id.as_u64().expect("checked above") as u32);
        }
        let tokens: Vec<String> = tokens.into_iter().map(|t| t.expect("every id taken")).collect();
        let byte_char = byte_chars();
        if let Some(byte) = byte_char.iter().position(|c| !ids.contains_key(&c.to_string())) {
            return Err(ModelError::checkpoint(
                "vocab.json",
                format!("no token for byte {byte:#04x}"),
                "a token for each of the 256 bytes",
            ));
        }
        let mut ranks = HashMap::new();
        let lines = merges_txt.lines().enumerate().filter(|(_, line)| !line.is_empty());
        for (number, line) in lines.filter(|(_, line)| !line.starts_with("#version")) {
            let pair = line.split_once(' ').filter(|(a, b)| !a.is_empty() && !b.contains(' '));
            let Some((a, b)) = pair else {
                let what = format!("merges.txt, line {}", number + 1);
                return Err(ModelError::checkpoint(what, format!("{line:?}"), "two tokens"));
            };
            if !ids.contains_key(&format!("{a}{b}")) {
                return Err(ModelError::checkpoint(
                    format!("merges.txt, line {}", number + 1),
                    format!("the merge {a:?} + {b:?}, whose result is not in vocab.json"),
                    "merges whose results are tokens",
                ));
            }
            let rank = ranks.len();
            ranks.entry((a.to_string(), b.to_string())).or_insert(rank);
        }
        let special = SPECIAL_TOKENS
            .iter()
            .filter_map(|&text| Some((text.to_string(), *ids.get(text)?)))
            .collect();
        let char_byte = byte_char.iter().enumerate().map(|(byte, &c)| (c, byte as u8)).collect();
        Ok(Self { ids, tokens, ranks, special, byte_char, char_byte })
    }

    /// `V`, tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The id of a token's text (`"<|endoftext|>"`, `"Ġworld"`), if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    // ANCHOR: encode
    /// The tokens of `text`: special tokens where their text appears, BPE on each piece of
    /// the rest.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let next_special = self
                .special
                .iter()
                .filter_map(|(token, id)| Some((rest.find(token.as_str())?, token, *id)))
                .min_by_key(|&(at, _, _)| at);
            let (plain, special) = match next_special {
                Some((at, token, id)) => (&rest[..at], Some((token.len(), id))),
                None => (rest, None),
            };
            for piece in pre_tokenize(plain) {
                let symbols =
                    piece.bytes().map(|b| self.byte_char[b as usize].to_string()).collect();
                ids.extend(self.bpe(symbols).iter().map(|symbol| self.ids[symbol]));
            }
            rest = &rest[plain.len()..];
            if let Some((len, id)) = special {
                ids.push(id);
                rest = &rest[len..];
            }
        }
        ids
    }
    // ANCHOR_END: encode

    // ANCHOR: bpe
    /// Merges one piece's symbols: while some adjacent pair is in `merges.txt`, join every
    /// occurrence of the one listed first, left to right.
    pub fn bpe(&self, mut symbols: Vec<String>) -> Vec<String> {
        loop {
            let rank = |i: usize| self.ranks.get(&(symbols[i].clone(), symbols[i + 1].clone()));
            let best = (0..symbols.len().saturating_sub(1))
                .filter_map(|i| Some((*rank(i)?, i)))
                .min()
                .map(|(_, i)| (symbols[i].clone(), symbols[i + 1].clone()));
            let Some((left, right)) = best else { return symbols };
            let mut merged = Vec::with_capacity(symbols.len());
            let mut i = 0;
            while i < symbols.len() {
                if i + 1 < symbols.len() && symbols[i] == left && symbols[i + 1] == right {
                    merged.push(format!("{left}{right}"));
                    i += 2;
                } else {
                    merged.push(std::mem::take(&mut symbols[i]));
                    i += 1;
                }
            }
            symbols = merged;
        }
    }
    // ANCHOR_END: bpe

    /// The text of `ids`; byte sequences that are not UTF-8 (a token can end inside a
    /// character) become U+FFFD, as transformers' `decode` does. An error for an id outside
    /// the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        let mut bytes = Vec::new();
        for &id in ids {
            let token = self.tokens.get(id as usize).ok_or_else(|| {
                let expected = format!("ids below the vocabulary's {}", self.tokens.len());
                ModelError::input("decoding", format!("token id {id}"), expected)
            })?;
            if self.special.iter().any(|(_, special)| *special == id) {
                bytes.extend(token.bytes());
            } else {
                for c in token.chars() {
                    let byte = self.char_byte.get(&c).ok_or_else(|| {
                        let found = format!("token {id}, {token:?}, holding {c:?}");
                        ModelError::checkpoint("vocab.json", found, "tokens written in byte_chars")
                    })?;
                    bytes.push(*byte);
                }
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_become_gpt2s_characters() {
        let table = byte_chars();
        assert_eq!(
            (table[b'A' as usize], table[b' ' as usize], table[b'\n' as usize]),
            ('A', 'Ġ', 'Ċ')
        );
        assert_eq!((table[0], table[0xAD], table[0xFF]), ('Ā', 'Ń', 'ÿ'));
        let distinct: std::collections::HashSet<char> = table.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn pieces_follow_gpt2s_pattern() {
        let cases: [(&str, &[&str]); 7] = [
            ("Hello world", &["Hello", " world"]),
            ("it's they're I'll", &["it", "'s", " they", "'re", " I", "'ll"]),
            ("3x 2022, ok!?", &["3", "x", " 2022", ",", " ok", "!?"]),
            ("a  b", &["a", " ", " b"]),
            ("a\n\nb ", &["a", "\n", "\n", "b", " "]),
            ("  lead", &[" ", " lead"]),
            ("café 東京 🙂👍", &["café", " 東京", " 🙂👍"]),
        ];
        for (text, pieces) in cases {
            assert_eq!(pre_tokenize(text), pieces, "{text:?}");
        }
        assert!(is_letter('é') && is_letter('東') && !is_letter('1') && !is_letter('🙂'));
    }

    fn tiny() -> Tokenizer {
        // Bytes, then the merges "l"+"o" and "lo"+"w" and "Ġ"+"low".
        let mut vocab: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
        vocab.extend(["lo", "low", "Ġlow", "<|endoftext|>"].map(String::from));
        let json: serde_json::Map<String, Value> =
            vocab.into_iter().enumerate().map(|(i, t)| (t, Value::from(i))).collect();
        let merges = "#version: 0.2\nl o\nlo w\nĠ low\n";
        Tokenizer::from_strings(&Value::Object(json).to_string(), merges).unwrap()
    }

    #[test]
    fn merges_apply_in_rank_order_and_decode_inverts() {
        let tokenizer = tiny();
        assert_eq!(tokenizer.encode("low low"), vec![257, 258]);
        assert_eq!(tokenizer.encode("lowlo<|endoftext|>x"), vec![257, 256, 259, b'x' as u32]);
        let text = "low, lower\n\tcafé 🙂<|endoftext|>";
        assert_eq!(tokenizer.decode(&tokenizer.encode(text)).unwrap(), text);
        assert!(tokenizer.decode(&[260]).unwrap_err().to_string().contains("token id 260"));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let vocab = r#"{"a": 0}"#;
        let message = Tokenizer::from_strings(vocab, "").unwrap_err().to_string();
        assert!(message.contains("no token for byte 0x00"), "{message}");
        let full: serde_json::Map<String, Value> =
            byte_chars().iter().enumerate().map(|(i, c)| (c.to_string(), Value::from(i))).collect();
        let full = Value::Object(full).to_string();
        let message =
            Tokenizer::from_strings(&full, "#version: 0.2\na b\n").unwrap_err().to_string();
        assert!(message.contains("line 2") && message.contains("not in vocab.json"), "{message}");
        let message = Tokenizer::from_strings(&full, "abc\n").unwrap_err().to_string();
        assert!(message.contains("two tokens"), "{message}");
        let twice = full.replacen("\"Ā\":0", "\"Ā\":1", 1);
        let message = Tokenizer::from_strings(&twice, "").unwrap_err().to_string();
        assert!(message.contains("taken twice"), "{message}");
        let message = Tokenizer::from_strings("[1]", "").unwrap_err().to_string();
        assert!(message.contains("vocab.json"), "{message}");
    }
}
