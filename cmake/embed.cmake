# Writes OUT, a translation unit with the bytes of IN as `std::string_view kforge::embedded::NAME`.
# Hex-escaped so that any byte, including a raw-string delimiter, survives.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" len)
math(EXPR bytes "${len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" escaped "${hex}")
# Split into lines so the compiler is not handed one enormous token.
string(REGEX REPLACE "((\\\\x[0-9a-f][0-9a-f]){64})" "\\1\"\n\"" escaped "${escaped}")
file(WRITE ${OUT} "#include <string_view>\nnamespace kforge::embedded {\nextern const std::string_view ${NAME};\nconst std::string_view ${NAME}(\n\"${escaped}\", ${bytes});\n}\n")
