# bash completion of the sparseflash commands (installed by make install
# under share/bash-completion/completions, one name per command). Options
# come from the command's own --help, so they never drift from it, and
# sf-run's and sf-serve's --chat-template names from its own refusal of an unknown one;
# other words complete as file names.
_sparseflash() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	if [[ $prev == --chat-template ]]; then
		local names
		names=$("$1" --chat-template '' 2>&1 | sed -n "s/.* is not one of //p" | tr -d ',')
		mapfile -t COMPREPLY < <(compgen -W "$names" -- "$cur")
	elif [[ $cur == -* ]]; then
		local opts
		opts=$("$1" --help 2>/dev/null | grep -oE -- '(^|[ ,])--?[a-zA-Z][a-zA-Z0-9-]*' |
			tr -d ' ,' | sort -u)
		mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
	else
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
	fi
}
complete -o filenames -F _sparseflash sf-profile sf-coact sf-place sf-encode sf-pack sf-run sf-serve
