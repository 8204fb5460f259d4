//! Prompt text: the package's `tokenizer.json` (through the `tokenizers` crate, no special tokens
//! added), `tokenizer_config.json` (chat template, eos token), and ChatML rendering of one user
//! turn. Only ChatML-family templates are rendered; anything else is an error, never a silently
//! different prompt.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Result};

/// A package's tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .finish()
    }
}

impl Tokenizer {
    /// Loads `dir/tokenizer.json`.
    pub fn open(dir: &Path) -> Result<Tokenizer> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(Error::package(
                &path,
                "tokenizer.json not found in the package",
            ));
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::package(&path, format!("cannot load the tokenizer: {e}")))?;
        Ok(Tokenizer { inner, path })
    }

    /// Token ids of `text`; special-token strings in the text map to their ids; nothing is added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::package(&self.path, format!("cannot tokenize the prompt: {e}")))
    }

    /// Text of `ids`, special tokens kept visible.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::package(&self.path, format!("cannot decode ids: {e}")))
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// What `tokenizer_config.json` says (both fields `None` when the file is absent).
#[derive(Clone, Debug, Default)]
pub struct TokenizerConfig {
    pub path: PathBuf,
    pub chat_template: Option<String>,
    pub eos_token: Option<String>,
}

impl TokenizerConfig {
    pub fn read(dir: &Path) -> Result<TokenizerConfig> {
        let path = dir.join("tokenizer_config.json");
        if !path.exists() {
            return Ok(TokenizerConfig {
                path,
                ..Default::default()
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| Error::package(&path, format!("malformed tokenizer_config.json: {e}")))?;
        let chat_template = v
            .get("chat_template")
            .and_then(Value::as_str)
            .map(str::to_string);
        // `eos_token` is a string or an added-token object with `content`.
        let eos_token = match v.get("eos_token") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        Ok(TokenizerConfig {
            path,
            chat_template,
            eos_token,
        })
    }

    /// The prompt wrapped as one ChatML user turn plus the assistant generation prompt.
    pub fn apply_chat_template(&self, prompt: &str) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            Error::package(
                &self.path,
                "no chat_template: cannot use --chat with this model",
            )
        })?;
        render_chatml(template, prompt).map_err(|m| Error::package(&self.path, m))
    }
}

const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

/// Renders `prompt` as a ChatML conversation for a ChatML-family template:
/// `[<|im_start|>system\n{default}<|im_end|>\n]<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n`,
/// where the system turn appears when the template writes a literal default system message (one
/// it inserts when the conversation has none).
pub fn render_chatml(template: &str, prompt: &str) -> std::result::Result<String, String> {
    if !template.contains(IM_START) || !template.contains(IM_END) {
        return Err("unsupported chat_template: only ChatML-style templates (<|im_start|> … <|im_end|>) are supported".into());
    }
    let mut out = String::new();
    if let Some(system) = literal_system_message(template) {
        out += &format!("{IM_START}system\n{system}{IM_END}\n");
    }
    out += &format!("{IM_START}user\n{prompt}{IM_END}\n{IM_START}assistant\n");
    Ok(out)
}

/// The text of a system turn written literally into the template, if any. Jinja string literals
/// spell the newline `\n`, so the template is searched with those escapes resolved; a system turn
/// that is built from template expressions (`{{ … }}`, string concatenation, quotes) is not a
/// literal default.
fn literal_system_message(template: &str) -> Option<String> {
    let text = template.replace("\\n", "\n");
    let head = format!("{IM_START}system\n");
    let start = text.find(&head)? + head.len();
    let len = text[start..].find(IM_END)?;
    let body = &text[start..start + len];
    let templated = ["{{", "{%", "'", "\"", "+"]
        .iter()
        .any(|m| body.contains(m));
    (!templated).then(|| body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn chatml_with_default_system() {
        assert_eq!(
            render_chatml(SMOL, "Hi").unwrap(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn chatml_without_default_system_and_non_chatml() {
        let plain = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}";
        assert_eq!(
            render_chatml(plain, "Hi").unwrap(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(render_chatml("[INST] {{ m }} [/INST]", "Hi").is_err());
    }
}
