// The run query language: a lexer, a recursive-descent parser that types
// every literal as its field is, and the evaluation against a run record.
#include "persistence/run_query.hpp"

#include <cctype>
#include <charconv>
#include <cmath>

#include "base/time_text.hpp"
#include "durin/limits.hpp"

namespace durin::persistence {

namespace {

struct token {
  enum class kind : std::uint8_t {
    end,
    word,  // a field name or a keyword (AND, OR, IN, TRUE, FALSE)
    text,  // a quoted string, unquoted
    number,
    op,
    open,
    close,
    comma,
  };
  kind what = kind::end;
  std::string text;
  std::size_t position = 0;  // 1-based
};

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

bool is_keyword(const token& t, std::string_view keyword) {
  if (t.what != token::kind::word || t.text.size() != keyword.size()) {
    return false;
  }
  for (std::size_t i = 0; i < keyword.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(t.text[i])) != keyword[i]) {
      return false;
    }
  }
  return true;
}

std::string shown(const token& t) {
  if (t.what == token::kind::end) {
    return "the end of the query";
  }
  return "'" + t.text + "'";
}

class parser {
 public:
  parser(std::string_view text, const attribute_type_of& type_of)
      : text_(text), type_of_(type_of) {}

  result<run_query> parse() {
    if (text_.size() > limits::query_bytes_max) {
      return make_error(errc::invalid_argument,
                        "query: at most " +
                            std::to_string(limits::query_bytes_max) +
                            " bytes; got " + std::to_string(text_.size()));
    }
    if (!lex()) {
      return make_error(errc::invalid_argument, problem_);
    }
    if (tokens_.front().what == token::kind::end) {
      return run_query{};
    }
    auto query = parse_or(0);
    if (problem_.empty() && peek().what != token::kind::end) {
      fail(peek(), "expected AND, OR or the end, found " + shown(peek()));
    }
    if (!problem_.empty()) {
      return make_error(errc::invalid_argument, problem_);
    }
    return query;
  }

 private:
  // ---- lexing ---------------------------------------------------------------

  bool lex() {
    std::size_t i = 0;
    while (true) {
      while (i < text_.size() &&
             std::isspace(static_cast<unsigned char>(text_[i])) != 0) {
        ++i;
      }
      token t;
      t.position = i + 1;
      if (i == text_.size()) {
        tokens_.push_back(std::move(t));
        return true;
      }
      const char c = text_[i];
      if (c == '(' || c == ')' || c == ',') {
        t.what = c == '('   ? token::kind::open
                 : c == ')' ? token::kind::close
                            : token::kind::comma;
        t.text = std::string(1, c);
        ++i;
      } else if (c == '=' || c == '<' || c == '>' || c == '!') {
        t.what = token::kind::op;
        t.text = std::string(1, c);
        ++i;
        if (i < text_.size() && text_[i] == '=' && c != '=') {
          t.text += '=';
          ++i;
        }
        if (t.text == "!") {
          return lex_fail(t, "'!' must be followed by '='");
        }
      } else if (c == '\'' || c == '"') {
        t.what = token::kind::text;
        ++i;
        bool closed = false;
        while (i < text_.size()) {
          if (text_[i] == '\\' && i + 1 < text_.size()) {
            t.text += text_[i + 1];
            i += 2;
          } else if (text_[i] == c) {
            closed = true;
            ++i;
            break;
          } else {
            t.text += text_[i++];
          }
        }
        if (!closed) {
          return lex_fail(t, "a string is not closed");
        }
      } else if (std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '-' ||
                 c == '+' || c == '.') {
        t.what = token::kind::number;
        while (i < text_.size() &&
               (std::isalnum(static_cast<unsigned char>(text_[i])) != 0 ||
                text_[i] == '.' || text_[i] == '-' || text_[i] == '+')) {
          // An exponent's sign belongs to the number; a minus after a digit
          // that is no exponent's is an error found when the number parses.
          t.text += text_[i++];
        }
      } else if (word_char(c)) {
        t.what = token::kind::word;
        while (i < text_.size() && word_char(text_[i])) {
          t.text += text_[i++];
        }
      } else {
        return lex_fail(t, "unexpected character '" + std::string(1, c) + "'");
      }
      tokens_.push_back(std::move(t));
    }
  }

  bool lex_fail(const token& t, std::string why) {
    fail(t, std::move(why));
    return false;
  }

  // ---- parsing --------------------------------------------------------------

  const token& peek() const { return tokens_[next_]; }
  const token& take() {
    const auto& t = tokens_[next_];
    if (t.what != token::kind::end) {
      ++next_;
    }
    return t;
  }

  void fail(const token& at, std::string why) {
    if (problem_.empty()) {
      problem_ =
          "query: at position " + std::to_string(at.position) + ": " + why;
    }
  }

  run_query parse_or(std::size_t depth) {
    run_query any{.what = run_query::kind::any};
    any.children.push_back(parse_and(depth));
    while (problem_.empty() && is_keyword(peek(), "OR")) {
      take();
      any.children.push_back(parse_and(depth));
    }
    if (any.children.size() == 1) {
      return std::move(any.children.front());
    }
    return any;
  }

  run_query parse_and(std::size_t depth) {
    run_query all{.what = run_query::kind::all};
    all.children.push_back(parse_primary(depth));
    while (problem_.empty() && is_keyword(peek(), "AND")) {
      take();
      all.children.push_back(parse_primary(depth));
    }
    if (all.children.size() == 1) {
      return std::move(all.children.front());
    }
    return all;
  }

  run_query parse_primary(std::size_t depth) {
    if (!problem_.empty()) {
      return {};
    }
    if (peek().what == token::kind::open) {
      const auto& open = take();
      if (depth + 1 > limits::query_depth_max) {
        fail(open, "parentheses nest deeper than " +
                       std::to_string(limits::query_depth_max));
        return {};
      }
      auto inner = parse_or(depth + 1);
      if (problem_.empty() && peek().what != token::kind::close) {
        fail(peek(), "expected ')' to close the '(' at position " +
                         std::to_string(open.position) + ", found " +
                         shown(peek()));
      }
      take();
      return inner;
    }
    return parse_comparison();
  }

  run_query parse_comparison() {
    const auto& name = take();
    if (name.what != token::kind::word || is_keyword(name, "AND") ||
        is_keyword(name, "OR") || is_keyword(name, "IN")) {
      fail(name, "expected a field name, found " + shown(name));
      return {};
    }
    if (++comparisons_ > limits::query_comparisons_max) {
      fail(name, "more than " + std::to_string(limits::query_comparisons_max) +
                     " comparisons");
      return {};
    }
    run_query out{.what = run_query::kind::comparison};
    auto& comparison = out.comparison;
    field_of(name.text, comparison);
    const auto& op = take();
    std::vector<const token*> literals;
    if (is_keyword(op, "IN")) {
      comparison.op = query_op::in;
      if (take().what != token::kind::open) {
        fail(op, "IN is followed by a list in parentheses: IN ('a', 'b')");
        return {};
      }
      while (problem_.empty()) {
        literals.push_back(&take());
        if (!value_like(*literals.back())) {
          // Named here, where it is, not at the separator after it.
          fail(*literals.back(), "expected a value in the IN list, found " +
                                     shown(*literals.back()));
          return {};
        }
        if (literals.size() > limits::query_in_values_max) {
          fail(*literals.back(),
               "an IN list holds at most " +
                   std::to_string(limits::query_in_values_max) + " values");
          return {};
        }
        const auto& after = take();
        if (after.what == token::kind::close) {
          break;
        }
        if (after.what != token::kind::comma) {
          fail(after,
               "expected ',' or ')' in the IN list, found " + shown(after));
          return {};
        }
      }
    } else if (op.what == token::kind::op) {
      comparison.op = op_of(op.text);
      literals.push_back(&take());
    } else {
      fail(op, "expected an operator (=, !=, <, >, <=, >=, IN) after '" +
                   name.text + "', found " + shown(op));
      return {};
    }
    for (const auto* literal : literals) {
      if (!problem_.empty()) {
        break;
      }
      comparison.values.push_back(typed(name, comparison, *literal));
    }
    return out;
  }

  // A token that may be a literal (its type is checked later, by typed).
  static bool value_like(const token& t) {
    return t.what == token::kind::text || t.what == token::kind::number ||
           t.what == token::kind::word;
  }

  static query_op op_of(const std::string& text) {
    if (text == "=") {
      return query_op::eq;
    }
    if (text == "!=") {
      return query_op::ne;
    }
    if (text == "<") {
      return query_op::lt;
    }
    if (text == ">") {
      return query_op::gt;
    }
    return text == "<=" ? query_op::le : query_op::ge;
  }

  static void field_of(const std::string& name, query_comparison& out) {
    if (name == "status") {
      out.field = query_field::status;
    } else if (name == "flow") {
      out.field = query_field::flow;
    } else if (name == "scheduleId") {
      out.field = query_field::schedule_id;
    } else if (name == "createdAt") {
      out.field = query_field::created_at;
    } else if (name == "startedAt") {
      out.field = query_field::started_at;
    } else if (name == "completedAt") {
      out.field = query_field::completed_at;
    } else {
      out.field = query_field::attribute;
      out.attribute = name;
    }
  }

  // The literal's own type: a string is a keyword, a number with a point or
  // an exponent a double.
  std::optional<search_value> plain(const token& literal) {
    if (literal.what == token::kind::text) {
      return search_value::keyword(literal.text);
    }
    if (is_keyword(literal, "TRUE") || is_keyword(literal, "FALSE")) {
      return search_value::of_bool(is_keyword(literal, "TRUE"));
    }
    if (literal.what != token::kind::number) {
      fail(literal,
           "expected a value ('text', a number, true or false), "
           "found " +
               shown(literal));
      return std::nullopt;
    }
    const auto& text = literal.text;
    const char* first = text.data() + (text.front() == '+' ? 1 : 0);
    const char* last = text.data() + text.size();
    std::int64_t integer = 0;
    auto as_int = std::from_chars(first, last, integer);
    if (as_int.ec == std::errc() && as_int.ptr == last) {
      return search_value::of_int(integer);
    }
    double number = 0;
    auto as_double = std::from_chars(first, last, number);
    if (as_double.ec == std::errc() && as_double.ptr == last &&
        std::isfinite(number)) {
      return search_value::of_double(number);
    }
    fail(literal, "'" + text + "' is not a number");
    return std::nullopt;
  }

  search_value typed(const token& name, const query_comparison& comparison,
                     const token& literal) {
    auto value = plain(literal);
    if (!value) {
      return {};
    }
    std::optional<search_attribute_type> wanted;
    switch (comparison.field) {
      case query_field::status: {
        if (value->type != search_attribute_type::keyword ||
            !parse_run_status(value->text)) {
          fail(literal,
               "status is one of 'pending', 'running', 'waiting', "
               "'completed', 'failed', 'cancelled', 'terminated'; "
               "found " +
                   shown(literal));
          return {};
        }
        if (value->text == "blocked") {
          fail(literal,
               "status 'blocked' is not stored, so not queried: list with "
               "?status=blocked");
          return {};
        }
        wanted = search_attribute_type::keyword;
        break;
      }
      case query_field::flow:
      case query_field::schedule_id:
        wanted = search_attribute_type::keyword;
        break;
      case query_field::created_at:
      case query_field::started_at:
      case query_field::completed_at:
        wanted = search_attribute_type::time;
        break;
      case query_field::attribute:
        wanted = type_of_ ? type_of_(comparison.attribute) : std::nullopt;
        break;
    }
    if (!wanted) {
      wanted = value->type;  // an attribute this node has not seen
    }
    auto field_text = [&] {
      return comparison.field == query_field::attribute
                 ? "attribute '" + name.text + "'"
                 : "'" + name.text + "'";
    };
    if (*wanted == search_attribute_type::time &&
        value->type == search_attribute_type::keyword) {
      auto ms = time_text::parse_rfc3339_ms(value->text);
      if (!ms) {
        fail(literal, field_text() + " is a time; " + shown(literal) +
                          " is not an RFC 3339 time such as "
                          "'2026-12-02T10:00:00Z'");
        return {};
      }
      value = search_value::time_ms(*ms);
    } else if (*wanted == search_attribute_type::number &&
               value->type == search_attribute_type::integer) {
      value = search_value::of_double(static_cast<double>(value->integer));
    }
    if (value->type != *wanted) {
      fail(literal, field_text() + " is " + std::string(article(*wanted)) +
                        std::string(to_string(*wanted)) + "; " +
                        shown(literal) + " is " +
                        std::string(article(value->type)) +
                        std::string(to_string(value->type)));
      return {};
    }
    bool ordered = comparison.op != query_op::eq &&
                   comparison.op != query_op::ne &&
                   comparison.op != query_op::in;
    if (ordered && (*wanted == search_attribute_type::boolean ||
                    comparison.field == query_field::status)) {
      fail(name, field_text() + " is compared only with =, != and IN");
      return {};
    }
    if (!values_agree(comparison, *value)) {
      fail(literal, "the values of one IN list have one type");
      return {};
    }
    return *value;
  }

  static bool values_agree(const query_comparison& comparison,
                           const search_value& value) {
    return comparison.values.empty() ||
           comparison.values.front().type == value.type;
  }

  static std::string_view article(search_attribute_type type) {
    return type == search_attribute_type::integer ? "an " : "a ";
  }

  std::string_view text_;
  const attribute_type_of& type_of_;
  std::vector<token> tokens_;
  std::size_t next_ = 0;
  std::size_t comparisons_ = 0;
  std::string problem_;
};

template <class T>
bool compare(query_op op, const T& left, const T& right) {
  switch (op) {
    case query_op::eq:
    case query_op::in:
      return left == right;
    case query_op::ne:
      return left != right;
    case query_op::lt:
      return left < right;
    case query_op::gt:
      return left > right;
    case query_op::le:
      return left <= right;
    case query_op::ge:
      return left >= right;
  }
  return false;
}

bool compare_value(query_op op, const search_value& left,
                   const search_value& right) {
  if (left.type != right.type) {
    return false;  // typed elsewhere (another node's first use)
  }
  switch (left.type) {
    case search_attribute_type::keyword:
      return compare(op, left.text, right.text);
    case search_attribute_type::integer:
    case search_attribute_type::time:
      return compare(op, left.integer, right.integer);
    case search_attribute_type::number:
      return compare(op, left.number, right.number);
    case search_attribute_type::boolean:
      return compare(op, left.boolean, right.boolean);
  }
  return false;
}

// The run's value of the field; nullopt when it has none.
std::optional<search_value> field_value(const query_comparison& comparison,
                                        const run_record& record) {
  auto time = [](std::int64_t ms) -> std::optional<search_value> {
    if (ms <= 0) {
      return std::nullopt;
    }
    return search_value::time_ms(ms);
  };
  switch (comparison.field) {
    case query_field::status:
      return search_value::keyword(std::string(to_string(record.status)));
    case query_field::flow:
      return search_value::keyword(record.flow);
    case query_field::schedule_id:
      if (record.schedule_id.empty()) {
        return std::nullopt;
      }
      return search_value::keyword(record.schedule_id);
    case query_field::created_at:
      return time(record.created_at_ms);
    case query_field::started_at:
      return time(record.started_at_ms);
    case query_field::completed_at:
      return time(record.completed_at_ms);
    case query_field::attribute: {
      auto found = record.search.find(comparison.attribute);
      if (found == record.search.end()) {
        return std::nullopt;
      }
      return found->second;
    }
  }
  return std::nullopt;
}

bool matches_comparison(const query_comparison& comparison,
                        const run_record& record) {
  auto value = field_value(comparison, record);
  if (!value) {
    return false;
  }
  for (const auto& wanted : comparison.values) {
    if (compare_value(comparison.op, *value, wanted)) {
      return true;  // one value, or any of an IN list
    }
  }
  return false;
}

}  // namespace

result<run_query> parse_run_query(std::string_view text,
                                  const attribute_type_of& type_of) {
  return parser(text, type_of).parse();
}

bool matches(const run_query& query, const run_record& record) {
  switch (query.what) {
    case run_query::kind::comparison:
      return matches_comparison(query.comparison, record);
    case run_query::kind::all:
      for (const auto& child : query.children) {
        if (!matches(child, record)) {
          return false;
        }
      }
      return true;
    case run_query::kind::any:
      for (const auto& child : query.children) {
        if (matches(child, record)) {
          return true;
        }
      }
      return false;
  }
  return false;
}

}  // namespace durin::persistence
