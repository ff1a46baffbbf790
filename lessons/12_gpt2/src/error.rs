//! The one error type of the model: what was wrong, where, and what was expected.

use std::fmt;

use reference::AttentionError;

/// Why a checkpoint, a tokenizer or a model call was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelError {
    /// A file could not be read.
    Io {
        /// The path.
        path: String,
        /// The system's message.
        message: String,
    },
    /// `config.json`, the weights or the tokenizer files are not what a GPT-2 checkpoint holds.
    Checkpoint {
        /// Which file or tensor.
        what: String,
        /// What it holds.
        found: String,
        /// What a GPT-2 checkpoint holds there.
        expected: String,
    },
    /// The tokens or options of a call do not fit the model.
    Input {
        /// Which argument.
        what: String,
        /// What it was.
        found: String,
        /// What the model accepts.
        expected: String,
    },
    /// The attention backend refused its inputs.
    Attention(AttentionError),
    /// The GPU model's device failed or refused (a limit, a shader, a lost device).
    Gpu(AttentionError),
}

impl ModelError {
    /// [`ModelError::Checkpoint`].
    pub fn checkpoint(
        what: impl Into<String>,
        found: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Self::Checkpoint { what: what.into(), found: found.into(), expected: expected.into() }
    }

    /// [`ModelError::Input`].
    pub fn input(
        what: impl Into<String>,
        found: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Self::Input { what: what.into(), found: found.into(), expected: expected.into() }
    }

    /// [`ModelError::Io`] for `path`.
    pub fn io(path: &std::path::Path, error: std::io::Error) -> Self {
        Self::Io { path: path.display().to_string(), message: error.to_string() }
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, message } => write!(f, "cannot read {path}: {message}"),
            Self::Checkpoint { what, found, expected } => {
                write!(f, "checkpoint: {what}: found {found}; expected {expected}")
            }
            Self::Input { what, found, expected } => {
                write!(f, "{what}: found {found}; expected {expected}")
            }
            Self::Attention(error) => write!(f, "attention: {error}"),
            Self::Gpu(error) => write!(f, "on the GPU: {error}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<AttentionError> for ModelError {
    fn from(error: AttentionError) -> Self {
        Self::Attention(error)
    }
}
