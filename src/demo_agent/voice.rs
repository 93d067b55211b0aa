//! The WeatherAgent's voice (`interactionMode: "voice"`): the forecast
//! spoken as a WAV file, streamed a word at a time. No speech engine: each
//! word is a tone whose pitch comes from the word, so the audio is
//! deterministic, small, and plays in any player. No I/O.

/// Samples per second: telephone quality, as a voice agent would send.
pub const RATE: u32 = 8_000;
/// The media type of every chunk (the whole stream is one WAV file).
pub const CONTENT_TYPE: &str = "audio/wav";
/// Each word lasts this many samples (120 ms), then a pause (30 ms).
const WORD: usize = 960;
const PAUSE: usize = 240;
/// A WAV header's size (RIFF, `fmt `, `data`).
pub const HEADER: usize = 44;

/// The forecast as WAV audio, one chunk per word: the first chunk starts
/// with the WAV header, so the chunks put together are one valid file.
pub fn speak(text: &str) -> Vec<Vec<u8>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let samples = words.len() * (WORD + PAUSE);
    let mut chunks: Vec<Vec<u8>> = words.iter().map(|w| word(w)).collect();
    if let Some(first) = chunks.first_mut() {
        let mut with_header = header(samples);
        with_header.append(first);
        *first = with_header;
    }
    chunks
}

/// One word's tone and the pause after it, as 16-bit little-endian PCM.
fn word(word: &str) -> Vec<u8> {
    // 300–800 Hz, from the word's letters.
    let sum: u32 = word.bytes().map(u32::from).sum();
    let pitch = 300.0 + f64::from(sum % 500);
    let mut pcm = Vec::with_capacity((WORD + PAUSE) * 2);
    for i in 0..WORD {
        let t = i as f64 / f64::from(RATE);
        // Faded in and out, so words do not click.
        let envelope = (std::f64::consts::PI * i as f64 / WORD as f64).sin();
        let sample = (envelope * 8_000.0 * (2.0 * std::f64::consts::PI * pitch * t).sin()) as i16;
        pcm.extend_from_slice(&sample.to_le_bytes());
    }
    pcm.resize((WORD + PAUSE) * 2, 0);
    pcm
}

/// The header of a mono 16-bit PCM WAV file of `samples` samples.
fn header(samples: usize) -> Vec<u8> {
    // A forecast is a sentence: far below 4 GiB of audio.
    let data = (samples * 2) as u32;
    let mut h = Vec::with_capacity(HEADER);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&(36 + data).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    h.extend_from_slice(&1u16.to_le_bytes()); // PCM
    h.extend_from_slice(&1u16.to_le_bytes()); // mono
    h.extend_from_slice(&RATE.to_le_bytes());
    h.extend_from_slice(&(RATE * 2).to_le_bytes()); // bytes per second
    h.extend_from_slice(&2u16.to_le_bytes()); // bytes per frame
    h.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data.to_le_bytes());
    h
}

/// Whether `bytes` are a WAV file as [`speak`] makes them, and its
/// samples' count: what a test or a consumer checks.
pub fn samples_of(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < HEADER || &bytes[0..4] != b"RIFF" || &bytes[8..16] != b"WAVEfmt " {
        return None;
    }
    let data = u32::from_le_bytes(bytes[40..44].try_into().ok()?) as usize;
    (bytes.len() == HEADER + data).then_some(data / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunks_make_one_wav_file_a_word_each() {
        let chunks = speak("The weather in Oslo is sunny.");
        assert_eq!(chunks.len(), 6);
        assert_eq!(chunks[0].len(), HEADER + (WORD + PAUSE) * 2);
        assert!(chunks[1..].iter().all(|c| c.len() == (WORD + PAUSE) * 2));
        let file: Vec<u8> = chunks.concat();
        assert_eq!(samples_of(&file), Some(6 * (WORD + PAUSE)));
        assert_eq!(samples_of(&file[..file.len() - 2]), None);
        // Different words sound different; the same text the same.
        assert_ne!(chunks[1], chunks[2]);
        assert_eq!(speak("The weather in Oslo is sunny."), chunks);
    }
}
