//! Why an import refused its input, with the options that would let it
//! in kept as options rather than words: the library names them as the
//! calls that set them (`ImportOptions::again()`), the command line as
//! its flags (`--again`, or `--load-again` for `--load`), each from the
//! same [`Refusal`].

use std::fmt;

/// An import option a refusal can name as the way past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImportOption {
    /// Import the whole input again ([`super::ImportOptions::again`]).
    Again,
    /// Import only the lines the store lacks ([`super::ImportOptions::resume`]).
    Resume,
    /// Leave out a torn last line ([`super::ImportOptions::skip_torn_tail`]).
    SkipTornTail,
    /// Record a checkpoint line whose files gc collected, as a record
    /// without them ([`super::CollectedCheckpoints::Record`]).
    RecordCollected,
}

impl ImportOption {
    /// The library call that sets the option, as a refusal's
    /// [`Display`](fmt::Display) names it.
    pub fn library_call(self) -> &'static str {
        match self {
            ImportOption::Again => "`ImportOptions::again()`",
            ImportOption::Resume => "`ImportOptions::resume()`",
            ImportOption::SkipTornTail => "`ImportOptions::skip_torn_tail`",
            ImportOption::RecordCollected => {
                "`ImportOptions::with_collected_checkpoints(CollectedCheckpoints::Record)`"
            }
        }
    }
}

/// One part of a refusal's message.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Option(ImportOption),
}

/// A refusal's message: text, with the import options it names kept
/// typed so each front end can say them in its own words
/// ([`Refusal::render`]). Displayed, it names them as library calls.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Refusal {
    pieces: Vec<Piece>,
}

impl Refusal {
    /// A refusal that starts with `text`.
    pub fn new(text: impl Into<String>) -> Refusal {
        Refusal::default().text(text)
    }

    /// `self`, then `text`.
    #[must_use]
    pub fn text(mut self, text: impl Into<String>) -> Refusal {
        let text = text.into();
        match self.pieces.last_mut() {
            Some(Piece::Text(t)) => t.push_str(&text),
            _ => self.pieces.push(Piece::Text(text)),
        }
        self
    }

    /// `self`, then the name of `option`.
    #[must_use]
    pub fn option(mut self, option: ImportOption) -> Refusal {
        self.pieces.push(Piece::Option(option));
        self
    }

    /// `text`, then `self`.
    #[must_use]
    pub fn after(self, text: impl Into<String>) -> Refusal {
        let mut out = Refusal::new(text);
        for p in self.pieces {
            out = match p {
                Piece::Text(t) => out.text(t),
                Piece::Option(o) => out.option(o),
            };
        }
        out
    }

    /// The options the message names, in order.
    pub fn options(&self) -> impl Iterator<Item = ImportOption> + '_ {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Option(o) => Some(*o),
            Piece::Text(_) => None,
        })
    }

    /// The message, each option named by `name`.
    pub fn render(&self, name: impl Fn(ImportOption) -> String) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Option(o) => out.push_str(&name(*o)),
            }
        }
        out
    }
}

impl From<String> for Refusal {
    fn from(text: String) -> Refusal {
        Refusal::new(text)
    }
}

impl From<&str> for Refusal {
    fn from(text: &str) -> Refusal {
        Refusal::new(text)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(|o| o.library_call().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_stay_typed_and_render_in_either_words() {
        let r = Refusal::new("all its lines are recorded (import it again with ")
            .option(ImportOption::Again)
            .text(")")
            .after("e.jsonl: ");
        assert_eq!(
            r.to_string(),
            "e.jsonl: all its lines are recorded (import it again with `ImportOptions::again()`)"
        );
        assert_eq!(r.options().collect::<Vec<_>>(), [ImportOption::Again]);
        assert_eq!(
            r.render(|_| "--again".into()),
            "e.jsonl: all its lines are recorded (import it again with --again)"
        );
    }
}
