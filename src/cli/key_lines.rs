//! Where each key of a YAML (or JSON) document is. serde_yaml_ng's values carry no positions, so
//! `apply --validate` reads a document that has unknown fields once more, as saphyr-parser's
//! events, whose marks give the lines.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser};

use crate::schema::Step;

/// Stands in for a key that is not a scalar (a complex or alias key): no path names it.
const NO_KEY: Step = Step::Index(usize::MAX);

/// Where the parser is, one frame per open mapping or sequence.
enum Frame {
    /// A mapping, with the key whose value comes next (`None`: a key comes next).
    Map(Option<Step>),
    /// A sequence, with the index of the next item.
    Seq(usize),
}

/// The line (1-based, in `text`) of each mapping key of the first document of `text`, by path,
/// and of the root (the empty path). A key met twice keeps its first line; after a syntax
/// error nothing more is found.
pub fn key_lines(text: &str) -> HashMap<Vec<Step>, usize> {
    let mut lines = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut path: Vec<Step> = Vec::new();
    let mut parser = Parser::new_from_str(text);
    while let Some(Ok((event, span))) = parser.next_event() {
        let line = span.start.line();
        match event {
            Event::Scalar(text, ..) => match stack.last_mut() {
                Some(Frame::Map(next @ None)) => {
                    let key = Step::Key(text.into_owned());
                    let mut at = path.clone();
                    at.push(key.clone());
                    lines.entry(at).or_insert(line);
                    *next = Some(key);
                }
                _ => finished(&mut stack),
            },
            Event::Alias(_) => finished(&mut stack),
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                match stack.last() {
                    Some(Frame::Map(key)) => path.push(key.clone().unwrap_or(NO_KEY)),
                    Some(Frame::Seq(i)) => path.push(Step::Index(*i)),
                    None => {
                        lines.entry(Vec::new()).or_insert(line);
                    }
                }
                stack.push(match event {
                    Event::MappingStart(..) => Frame::Map(None),
                    _ => Frame::Seq(0),
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
                if stack.is_empty() {
                    break;
                }
                path.pop();
                finished(&mut stack);
            }
            Event::DocumentEnd => break,
            _ => {}
        }
    }
    lines
}

/// A node ended: the next one is its mapping's value or next key, or its sequence's next item.
fn finished(stack: &mut [Frame]) {
    match stack.last_mut() {
        Some(Frame::Map(next @ None)) => *next = Some(NO_KEY),
        Some(Frame::Map(next)) => *next = None,
        Some(Frame::Seq(i)) => *i += 1,
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(lines: &HashMap<Vec<Step>, usize>, path: &[&str]) -> Option<usize> {
        let path: Vec<Step> = path
            .iter()
            .map(|s| match s.parse() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Key((*s).to_owned()),
            })
            .collect();
        lines.get(&path).copied()
    }

    #[test]
    fn block_yaml_keys_have_their_lines() {
        let text = "\
# a comment

kind: Application
spec:
  sources:
  - repoURL: r
  - repoURL: r
    helm:
      valueFiles: [a, b]
      values: |
        x: 1
  \"quoted key\": &x {a: 1}
  after: *x
  ? [complex, key]
  : {hidden: 1}
  last: 1
";
        let lines = key_lines(text);
        assert_eq!(line(&lines, &[]), Some(3));
        assert_eq!(line(&lines, &["kind"]), Some(3));
        assert_eq!(line(&lines, &["spec", "sources", "0", "repoURL"]), Some(6));
        assert_eq!(line(&lines, &["spec", "sources", "1", "repoURL"]), Some(7));
        assert_eq!(
            line(&lines, &["spec", "sources", "1", "helm", "values"]),
            Some(10)
        );
        // The text of a block scalar is not a key.
        assert_eq!(
            line(&lines, &["spec", "sources", "1", "helm", "values", "x"]),
            None
        );
        assert_eq!(line(&lines, &["spec", "quoted key", "a"]), Some(12));
        assert_eq!(line(&lines, &["spec", "after"]), Some(13));
        assert_eq!(line(&lines, &["spec", "hidden"]), None);
        assert_eq!(line(&lines, &["spec", "last"]), Some(16));
    }

    #[test]
    fn flow_mappings_and_json_have_their_lines() {
        let json =
            "{\n  \"metadata\": {\"name\": \"a\"},\n  \"spec\": {\n    \"items\": [{}, {\"k\": 1}]\n  }\n}\n";
        let lines = key_lines(json);
        assert_eq!(line(&lines, &["metadata", "name"]), Some(2));
        assert_eq!(line(&lines, &["spec"]), Some(3));
        assert_eq!(line(&lines, &["spec", "items", "1", "k"]), Some(4));
        let flow = key_lines("a: {b: [x, {c: 1,\n  d: 2}]}\n");
        assert_eq!(line(&flow, &["a", "b", "1", "d"]), Some(2));
    }

    #[test]
    fn broken_text_keeps_what_came_before_and_only_the_first_document_counts() {
        let lines = key_lines("a: 1\nb: [\nc: 2\n");
        assert_eq!(line(&lines, &["a"]), Some(1));
        assert_eq!(line(&lines, &["c"]), None);
        let lines = key_lines("a: 1\n---\nb: 2\n");
        assert_eq!(line(&lines, &["b"]), None);
        assert!(key_lines("").is_empty());
        assert!(key_lines("just a scalar").is_empty());
    }
}
