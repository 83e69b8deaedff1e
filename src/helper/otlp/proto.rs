//! The few protobuf wire-format rules OTLP needs, written by hand: varints, tags,
//! length-delimited fields, fixed 64-bit numbers; and a reader that finds one field in
//! a message (a collector's answer). Pure.
//!
//! By hand rather than with `prost`: the messages lifeguard writes are a dozen fields
//! (opentelemetry-proto's metrics.proto) and the slim build has no room for a code
//! generator's runtime. The rules are the protobuf encoding guide's
//! (protobuf.dev/programming-guides/encoding).
#![forbid(unsafe_code)]

/// Wire types (encoding guide, "Message Structure").
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// A message being written: fields appended in any order, nested messages written into
/// their own `Message` and appended whole.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Message(pub Vec<u8>);

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Message {
    fn tag(&mut self, field: u32, wire: u64) {
        varint(&mut self.0, (u64::from(field) << 3) | wire);
    }

    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.tag(field, VARINT);
        varint(&mut self.0, v);
        self
    }

    pub fn bool(&mut self, field: u32, v: bool) -> &mut Self {
        self.uint(field, u64::from(v))
    }

    pub fn fixed64(&mut self, field: u32, v: u64) -> &mut Self {
        self.tag(field, FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn double(&mut self, field: u32, v: f64) -> &mut Self {
        self.fixed64(field, v.to_bits())
    }

    pub fn bytes(&mut self, field: u32, v: &[u8]) -> &mut Self {
        self.tag(field, LEN);
        varint(&mut self.0, v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }

    pub fn string(&mut self, field: u32, v: &str) -> &mut Self {
        self.bytes(field, v.as_bytes())
    }

    pub fn message(&mut self, field: u32, m: &Message) -> &mut Self {
        self.bytes(field, &m.0)
    }

    /// A packed repeated fixed64 or double field (proto3 packs repeated scalars).
    pub fn packed64(
        &mut self,
        field: u32,
        values: impl ExactSizeIterator<Item = u64>,
    ) -> &mut Self {
        self.tag(field, LEN);
        varint(&mut self.0, values.len() as u64 * 8);
        for v in values {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }
}

/// One field of a message as read: a number (varint or fixed) or bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Field<'a> {
    Number(u64),
    Bytes(&'a [u8]),
}

fn read_varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *data.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of `data` in order, as (number, value); None for a message that is not
/// well formed.
pub fn fields(data: &[u8]) -> Option<Vec<(u32, Field<'_>)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let key = read_varint(data, &mut at)?;
        let field = u32::try_from(key >> 3).ok()?;
        let value = match key & 7 {
            VARINT => Field::Number(read_varint(data, &mut at)?),
            FIXED64 | FIXED32 => {
                let n = if key & 7 == FIXED64 { 8 } else { 4 };
                let raw = data.get(at..at + n)?;
                at += n;
                let mut le = [0u8; 8];
                le[..n].copy_from_slice(raw);
                Field::Number(u64::from_le_bytes(le))
            }
            LEN => {
                let n = usize::try_from(read_varint(data, &mut at)?).ok()?;
                let raw = data.get(at..at.checked_add(n)?)?;
                at += n;
                Field::Bytes(raw)
            }
            _ => return None,
        };
        out.push((field, value));
    }
    Some(out)
}

/// The last value of field `number` in `data` (protobuf: the last one wins).
pub fn field(data: &[u8], number: u32) -> Option<Field<'_>> {
    fields(data)?
        .into_iter()
        .rev()
        .find(|(n, _)| *n == number)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoding_guides_own_examples() {
        // "150" in field 1 is 08 96 01; "testing" in field 2 is 12 07 74 65 73 74 69 6e 67.
        assert_eq!(Message::default().uint(1, 150).0, [0x08, 0x96, 0x01]);
        assert_eq!(
            Message::default().string(2, "testing").0,
            [0x12, 0x07, 0x74, 0x65, 0x73, 0x74, 0x69, 0x6e, 0x67]
        );
        // A nested message is length-delimited: field 3 holding the first example.
        let mut inner = Message::default();
        inner.uint(1, 150);
        assert_eq!(
            Message::default().message(3, &inner).0,
            [0x1a, 0x03, 0x08, 0x96, 0x01]
        );
        // Fixed 64-bit, little-endian; double by its bits.
        assert_eq!(
            Message::default().double(4, 1.0).0,
            [0x21, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]
        );
        assert_eq!(
            Message::default().packed64(6, [1u64, 2].into_iter()).0,
            [0x32, 16, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn what_is_written_reads_back_and_junk_is_refused() {
        let mut inner = Message::default();
        inner.string(2, "rejected for a reason");
        let mut m = Message::default();
        m.uint(1, 7)
            .fixed64(3, u64::MAX)
            .message(2, &inner)
            .uint(1, 9);
        assert_eq!(field(&m.0, 1), Some(Field::Number(9)), "the last one wins");
        assert_eq!(field(&m.0, 3), Some(Field::Number(u64::MAX)));
        let Some(Field::Bytes(raw)) = field(&m.0, 2) else {
            panic!("no field 2");
        };
        assert_eq!(
            field(raw, 2),
            Some(Field::Bytes(&b"rejected for a reason"[..]))
        );
        assert_eq!(field(&m.0, 5), None);
        assert_eq!(fields(&[]), Some(vec![]));
        for junk in [&[0x08][..], &[0x12, 0x05, 1], &[0x0b], &[0xff; 11]] {
            assert_eq!(fields(junk), None, "{junk:?}");
        }
    }
}
