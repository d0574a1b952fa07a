#include "text/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "text/utf8.h"

namespace kubetune::text::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    // Jinja normalises newlines and drops one trailing newline (keep_trailing_newline=False).
    std::string normalized;
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\r' && i + 1 < src_.size() && src_[i + 1] == '\n') continue;
      normalized.push_back(src_[i] == '\r' ? '\n' : src_[i]);
    }
    if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
    src_ = std::move(normalized);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    bool strip_leading = false;  // the previous tag ended with '-'
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
      if (strip_leading) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      }
      if (tag == src_.size()) {
        emit_text(text, pos_);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop spaces/tabs between the start of the line and a block or comment tag.
        const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_begin > 0 || line_starting) && line_begin < text.size() &&
            text.find_first_not_of(" \t\f\v\r", line_begin) == std::string::npos) {
          text.erase(line_begin);
        }
      }
      emit_text(text, pos_);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        strip_leading = lex_comment(tag);
      } else {
        strip_leading = lex_tag(kind == '{');
      }
    }
    tokens_.push_back({Token::Type::End, "", line_at(src_.size()), 1});
    return tokens_;
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return src_.size();
  }

  // Line and column by binary search, so that lexing stays linear in the template size.
  int line_at(size_t pos) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) -
                            line_starts_.begin());
  }
  int column_at(size_t pos) const {
    return static_cast<int>(pos - line_starts_[static_cast<size_t>(line_at(pos)) - 1]) + 1;
  }
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw std::runtime_error("line " + std::to_string(line_at(pos)) + ", column " +
                             std::to_string(column_at(pos)) + ": " + what);
  }

  void emit_text(const std::string& text, size_t at) {
    if (!text.empty()) tokens_.push_back({Token::Type::Text, text, line_at(at), column_at(at)});
  }
  void emit(Token::Type type, std::string value, size_t at) {
    tokens_.push_back({type, std::move(value), line_at(at), column_at(at)});
  }

  // Handles a trailing-whitespace rule after a block/comment end; returns true for '-'.
  bool after_block_end(char sign) {
    if (sign == '-') return true;
    // trim_blocks: the first newline after a block or comment tag is removed.
    if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;
    return false;
  }

  bool lex_comment(size_t begin) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(begin, "unterminated comment");
    const char sign = end > pos_ ? src_[end - 1] : '\0';
    pos_ = end + 2;
    return after_block_end(sign == '-' || sign == '+' ? sign : '\0');
  }

  // Lexes the inside of {{ }} or {% %}; returns true when the tag ends with '-'.
  bool lex_tag(bool is_var) {
    const size_t begin = pos_ - 2;
    emit(is_var ? Token::Type::VarBegin : Token::Type::BlockBegin, "", begin);
    const char close = is_var ? '}' : '%';
    int depth = 0;  // brackets opened inside the tag: "}}" inside a dict literal does not close it
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size())
        fail(begin, std::string("unterminated ") + (is_var ? "'{{'" : "'{%'"));
      const char c = src_[pos_];
      if (depth == 0) {
        char sign = '\0';
        size_t at = pos_;
        if ((c == '-' || c == '+') && pos_ + 2 < src_.size() + 0 && src_[pos_ + 1] == close &&
            src_[pos_ + 2] == '}') {
          sign = c;
          ++at;
        }
        if (src_[at] == close && at + 1 < src_.size() && src_[at + 1] == '}') {
          emit(is_var ? Token::Type::VarEnd : Token::Type::BlockEnd, "", pos_);
          pos_ = at + 2;
          if (is_var) return sign == '-';
          return after_block_end(sign);
        }
      }
      if (c == '\'' || c == '"') {
        lex_string();
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
          ++pos_;
        emit(Token::Type::Name, src_.substr(start, pos_ - start), start);
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                     "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        bool matched = false;
        for (const char* op : kOps) {
          const std::string o(op);
          if (src_.compare(pos_, o.size(), o) == 0) {
            if (o == "(" || o == "[" || o == "{") ++depth;
            if ((o == ")" || o == "]" || o == "}") && depth > 0) --depth;
            emit(Token::Type::Operator, o, pos_);
            pos_ += o.size();
            matched = true;
            break;
          }
        }
        if (!matched) fail(pos_, std::string("unexpected character '") + c + "'");
      }
    }
  }

  void lex_string() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      const char e = src_[pos_++];
      switch (e) {
        case 'n':
          value.push_back('\n');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case '0':
          value.push_back('\0');
          break;
        case '\\':
        case '\'':
        case '"':
          value.push_back(e);
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + digits > src_.size())
            fail(pos_, "truncated \\" + std::string(1, e) + " escape");
          const std::string hex = src_.substr(pos_, digits);
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
            fail(pos_, "invalid \\" + std::string(1, e) + " escape");
          }
          utf8::append(value, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
          pos_ += digits;
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          value.push_back('\\');
          value.push_back(e);
      }
    }
    emit(Token::Type::String, value, start);
  }

  void lex_number() {
    const size_t start = pos_;
    bool is_float = false;
    while (pos_ < src_.size() &&
           (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
      ++pos_;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t k = pos_ + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        pos_ = k;
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    emit(is_float ? Token::Type::Float : Token::Type::Integer, text, start);
  }

  std::string src_;
  std::vector<size_t> line_starts_ = {0};  // offset of each line's first character
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace kubetune::text::jinja
