# Reads the question from ERRAND_INPUT, writes the answer to ERRAND_RESPONSE_FILE,
# and keeps the worked calculation as an artifact.
set -eu
question=$(printf '%s' "$ERRAND_INPUT" | tr 'A-Z' 'a-z')
set -- $(printf '%s' "$question" | tr -c '0-9.\n' ' ')
if [ "$#" -lt 2 ]; then
  echo "calculator: I need a question with two numbers, got: $ERRAND_INPUT" >&2
  exit 2
fi
a=$1; b=$2
case "$question" in
  *plus*|*add*|*sum*|*+*) op='+' ;;
  *minus*|*subtract*|*-*) op='-' ;;
  *multipl*|*times*|*product*|*x*|*'*'*) op='*' ;;
  *divided*|*over*|*/*) op='/' ;;
  *) echo "calculator: no operation found in: $ERRAND_INPUT" >&2; exit 2 ;;
esac
answer=$(awk -v a="$a" -v b="$b" -v op="$op" 'BEGIN {
  if (op == "+") r = a + b; else if (op == "-") r = a - b;
  else if (op == "*") r = a * b; else { if (b == 0) exit 3; r = a / b }
  printf (r == int(r)) ? "%d" : "%.6g", r }')
echo "$a $op $b = $answer" > "$ERRAND_ARTIFACTS_DIR/calculation.txt"
echo "calculator ($(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$AGENT_CONFIG_PATH" | head -n 1)): $a $op $b = $answer"
printf '%s\n' "$answer" > "$ERRAND_RESPONSE_FILE"
