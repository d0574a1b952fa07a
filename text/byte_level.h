// GPT-2's reversible byte <-> printable-character mapping used by byte-level BPE
// (Llama 3, Qwen2, GPT-2/SmolLM): every byte becomes one visible Unicode character.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace kubetune::text::byte_level {

// UTF-8 of the character that stands for byte `b`.
const std::string& byte_to_char(unsigned char b);
// The byte a mapped character stands for, or nullopt for characters outside the mapping.
std::optional<unsigned char> char_to_byte(char32_t cp);
// Code point of the character standing for the space byte ('Ġ').
constexpr char32_t kSpaceChar = 0x120;

}  // namespace kubetune::text::byte_level
