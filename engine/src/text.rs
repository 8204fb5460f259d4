//! Text in and out: the package's `tokenizer.json` through the `tokenizers` crate, end-of-sequence
//! ids and the chat template from `tokenizer_config.json`, and a writer for byte-level BPE
//! `tokenizer.json` files (used by `engine tiny` and `engine convert`).
//!
//! Chat templates: the engine does not run Jinja. It supports the ChatML family (templates that
//! wrap turns in `<|im_start|>role\n … <|im_end|>\n`, as SmolLM2's does), including a default
//! system message that the template inserts when the conversation has none. Any other template is
//! an error naming the file, never a silently wrong prompt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The package's tokenizer plus what `tokenizer_config.json` says about it.
pub struct TextCodec {
    tokenizer: tokenizers::Tokenizer,
    config_path: PathBuf,
    chat_template: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for TextCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextCodec")
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl TextCodec {
    /// Loads `tokenizer.json` and (if present) `tokenizer_config.json` from a package directory.
    pub fn open(dir: &Path) -> Result<TextCodec> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(Error::package(
                &path,
                "tokenizer.json not found in the package",
            ));
        }
        let tokenizer = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::package(&path, format!("cannot load tokenizer: {e}")))?;
        let config_path = dir.join("tokenizer_config.json");
        let (mut chat_template, mut eos_token) = (None, None);
        if config_path.exists() {
            let text =
                std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                Error::package(
                    &config_path,
                    format!("malformed tokenizer_config.json: {e}"),
                )
            })?;
            chat_template = v
                .get("chat_template")
                .and_then(Value::as_str)
                .map(str::to_string);
            eos_token = match v.get("eos_token") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Object(o)) => {
                    o.get("content").and_then(Value::as_str).map(str::to_string)
                }
                _ => None,
            };
        }
        Ok(TextCodec {
            tokenizer,
            config_path,
            chat_template,
            eos_token,
        })
    }

    /// Encodes text; special-token strings in the text become their ids; no BOS is added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::msg(format!("cannot tokenize the prompt: {e}")))
    }

    /// Decodes ids, keeping special tokens visible.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| Error::msg(format!("cannot decode ids: {e}")))
    }

    /// The id of `tokenizer_config.json`'s `eos_token`, if it names a token.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos_token
            .as_deref()
            .and_then(|t| self.tokenizer.token_to_id(t))
    }

    /// Wraps a user prompt in the package's chat template, ready for generation.
    pub fn apply_chat_template(&self, prompt: &str) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            Error::package(
                &self.config_path,
                "no chat_template: cannot use --chat with this model",
            )
        })?;
        render_chatml(template, prompt).map_err(|m| Error::package(&self.config_path, m))
    }
}

/// Renders one user turn plus the assistant generation prompt with a ChatML-family template.
pub fn render_chatml(template: &str, prompt: &str) -> std::result::Result<String, String> {
    if !template.contains("<|im_start|>") || !template.contains("<|im_end|>") {
        return Err("unsupported chat_template: only ChatML-style templates (<|im_start|> … <|im_end|>) are supported".into());
    }
    let mut out = String::new();
    if let Some(system) = default_system(template) {
        out.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
    }
    out.push_str(&format!(
        "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    ));
    Ok(out)
}

/// A literal system turn written into the template (inserted when the conversation has none).
fn default_system(template: &str) -> Option<String> {
    let unescaped = template.replace("\\n", "\n");
    let start = unescaped.find("<|im_start|>system\n")? + "<|im_start|>system\n".len();
    let rest = &unescaped[start..];
    let end = rest.find("<|im_end|>")?;
    let text = &rest[..end];
    // A template that renders `message['content']` here has no literal default.
    (!text.contains("{{") && !text.contains('\'') && !text.contains('+')).then(|| text.to_string())
}

/// GPT-2's byte-to-unicode table: the printable stand-in character for each byte.
pub fn byte_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        table[b as usize] = char::from_u32(c).unwrap_or('\u{fffd}');
    }
    table
}

/// Writes a byte-level BPE `tokenizer.json` (GPT-2 style, no prefix space) with special tokens at
/// their given ids. `vocab` maps token strings (in byte-level alphabet) to ids. Keys are written
/// sorted, so the file is byte-identical for the same input.
pub fn bpe_tokenizer_json(
    vocab: &BTreeMap<String, u32>,
    merges: &[(String, String)],
    special: &[(u32, String)],
    split_digits: bool,
) -> String {
    let added: Vec<Value> = special
        .iter()
        .map(|(id, content)| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let pre_tokenizer = if split_digits {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            byte_level
        ]})
    } else {
        byte_level.clone()
    };
    let merges: Vec<Value> = merges.iter().map(|(a, b)| json!([a, b])).collect();
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
