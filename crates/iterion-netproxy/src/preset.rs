//! Shipped rule presets. Only `iterion-default` exists (facts §7.4); its
//! host list is copied verbatim from upstream. Preset rules are evaluated
//! before the block's own rules, so a block can still deny a preset host.

/// The `iterion-default` preset: LLM APIs, package registries, forges,
/// Debian and Nix mirrors (facts §7.4).
pub const ITERION_DEFAULT: &[&str] = &[
    // LLM
    "api.anthropic.com",
    "api.openai.com",
    "openrouter.ai",
    "**.bedrock.amazonaws.com",
    "**.googleapis.com",
    "**.openai.azure.com",
    "api.mistral.ai",
    "api.z.ai",
    // npm
    "registry.npmjs.org",
    "**.npmjs.org",
    // PyPI
    "pypi.org",
    "files.pythonhosted.org",
    // Go
    "proxy.golang.org",
    "sum.golang.org",
    // GitHub
    "github.com",
    "**.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    // Other forges
    "gitlab.com",
    "**.gitlab.com",
    "bitbucket.org",
    "**.bitbucket.org",
    // Debian
    "deb.debian.org",
    "security.debian.org",
    // Nix / devbox
    "cache.nixos.org",
    "channels.nixos.org",
    "releases.nixos.org",
    "nix-community.cachix.org",
    "devbox.sh",
    "**.devbox.sh",
    "get.jetify.com",
];

/// The name of the one shipped preset.
pub const ITERION_DEFAULT_NAME: &str = "iterion-default";

/// The rules of a preset, `None` for an unknown name. Names compare
/// case-insensitively (workflows may write the ident in any case).
pub fn rules(name: &str) -> Option<&'static [&'static str]> {
    if name.trim().eq_ignore_ascii_case(ITERION_DEFAULT_NAME) {
        Some(ITERION_DEFAULT)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_preset_compiles_and_has_facts_list() {
        let spec = iterion_core::NetworkSpec {
            rules: ITERION_DEFAULT.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        };
        assert!(crate::check_rules(&spec).is_empty());
        assert_eq!(ITERION_DEFAULT.len(), 31);
        assert!(rules("iterion-default").is_some());
        assert!(rules("nope").is_none());
    }
}
