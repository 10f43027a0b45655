package imagebuild

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SBOMMediaType is the media type of the SBOM and the artifact type of its manifest.
const SBOMMediaType = "application/spdx+json"

// MainModule is the module the kubefence binaries are built from.
const MainModule = "github.com/kubefence/kubefence"

// SBOMInput is what the SBOM of one platform image describes.
type SBOMInput struct {
	// Version is the release's; Repository where the image is published.
	Version, Repository string
	Arch                Arch
	// Digest is the platform image's manifest digest, the SBOM's subject.
	Digest  v1.Hash
	Created time.Time
	// BinDir holds the image's binaries, named as in Commands: their Go build info
	// names the modules linked into each.
	BinDir string
	// Debs are the Debian packages the image takes files from.
	Debs []*Deb
}

// The SPDX 2.3 JSON document, as much of it as kubefence fills in.
type (
	spdxDocument struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreation       `json:"creationInfo"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreation struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		Name                  string         `json:"name"`
		SPDXID                string         `json:"SPDXID"`
		VersionInfo           string         `json:"versionInfo,omitempty"`
		Supplier              string         `json:"supplier,omitempty"`
		DownloadLocation      string         `json:"downloadLocation"`
		FilesAnalyzed         bool           `json:"filesAnalyzed"`
		Checksums             []spdxChecksum `json:"checksums,omitempty"`
		LicenseConcluded      string         `json:"licenseConcluded"`
		LicenseDeclared       string         `json:"licenseDeclared"`
		CopyrightText         string         `json:"copyrightText"`
		ExternalRefs          []spdxRef      `json:"externalRefs,omitempty"`
		PrimaryPackagePurpose string         `json:"primaryPackagePurpose,omitempty"`
	}
	spdxChecksum struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	spdxRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	spdxRelationship struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

const noAssertion = "NOASSERTION"

// SBOM writes the SPDX 2.3 document of one platform image: the image, each kubefence
// binary (with its SHA-256) and the Go modules and standard library linked into it, as
// its build info records them, and each Debian package of the lock with its version,
// URL and the .deb's SHA-256. The same input gives the same bytes.
func SBOM(in SBOMInput) ([]byte, error) {
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("kubefence-%s-linux-%s", in.Version, in.Arch.Name),
		DocumentNamespace: fmt.Sprintf("%s/spdx/%s/linux/%s/%s", Source, in.Version, in.Arch.Name, in.Digest),
		CreationInfo: spdxCreation{Created: in.Created.UTC().Format(time.RFC3339),
			Creators: []string{"Organization: kubefence", "Tool: kubefence-hack-images-" + in.Version}},
	}
	b := sbomBuilder{doc: &doc, ids: map[string]bool{}}
	image := b.add(spdxPackage{Name: in.Repository, VersionInfo: in.Version, DownloadLocation: noAssertion,
		Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: in.Digest.Hex}}, PrimaryPackagePurpose: "CONTAINER",
		ExternalRefs: []spdxRef{purl(fmt.Sprintf("pkg:oci/kubefence@%s?arch=%s&repository_url=%s", url.QueryEscape(in.Digest.String()), in.Arch.Name, url.QueryEscape(in.Repository)))}},
		"image")
	b.relate("SPDXRef-DOCUMENT", "DESCRIBES", image)
	for _, c := range Commands {
		if err := b.addBinary(image, in, c); err != nil {
			return nil, err
		}
	}
	distro := debianRelease(in.Debs)
	for _, d := range in.Debs {
		id := b.add(spdxPackage{Name: d.Name, VersionInfo: d.Version, Supplier: "Organization: Debian",
			DownloadLocation: d.URL, Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: d.SHA256}},
			ExternalRefs: []spdxRef{purl(fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s&distro=%s", d.Name, purlEscape(d.Version), d.Arch, distro))}},
			"deb", d.Name, d.Arch)
		b.relate(image, "CONTAINS", id)
	}
	if b.err != nil {
		return nil, b.err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // purls hold "&"
	enc.SetIndent("", "  ")
	err := enc.Encode(doc)
	return out.Bytes(), err
}

// sbomBuilder adds packages with unique SPDX identifiers.
type sbomBuilder struct {
	doc *spdxDocument
	ids map[string]bool
	err error
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// add adds p with an identifier made of parts and returns it; every package is
// added once, so a second use of an identifier is a mistake.
func (b *sbomBuilder) add(p spdxPackage, parts ...string) string {
	id := "SPDXRef-" + spdxIDUnsafe.ReplaceAllString(strings.Join(parts, "-"), "-")
	if b.ids[id] {
		b.err = fmt.Errorf("sbom: two packages are %s", id)
	}
	b.ids[id] = true
	p.SPDXID = id
	for _, f := range []*string{&p.LicenseConcluded, &p.LicenseDeclared, &p.CopyrightText} {
		if *f == "" {
			*f = noAssertion
		}
	}
	b.doc.Packages = append(b.doc.Packages, p)
	return id
}

func (b *sbomBuilder) relate(from, typ, to string) {
	b.doc.Relationships = append(b.doc.Relationships, spdxRelationship{Element: from, Type: typ, Related: to})
}

// addBinary adds binary c of the image with a STATIC_LINK to the main module, every
// module and the Go standard library its build info lists; a module several binaries
// link is one package.
func (b *sbomBuilder) addBinary(image string, in SBOMInput, c Command) error {
	file := filepath.Join(in.BinDir, c.Name)
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("build info of %s: %w", c.Name, err)
	}
	sum := sha256.Sum256(data)
	bin := b.add(spdxPackage{Name: c.Name, VersionInfo: in.Version, DownloadLocation: noAssertion, PrimaryPackagePurpose: "APPLICATION",
		Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: hex.EncodeToString(sum[:])}}}, "binary", c.Name)
	b.relate(image, "CONTAINS", bin)
	mods := []struct{ path, version string }{
		{MainModule, in.Version},
		{"stdlib", strings.TrimPrefix(bi.GoVersion, "go")},
	}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		mods = append(mods, struct{ path, version string }{m.Path, m.Version})
	}
	for _, m := range mods {
		id := "SPDXRef-" + spdxIDUnsafe.ReplaceAllString("go-"+m.path+"-"+m.version, "-")
		if !b.ids[id] {
			b.add(spdxPackage{Name: m.path, VersionInfo: m.version, DownloadLocation: noAssertion, PrimaryPackagePurpose: "LIBRARY",
				ExternalRefs: []spdxRef{purl("pkg:golang/" + m.path + "@" + m.version)}}, "go", m.path, m.version)
		}
		b.relate(bin, "STATIC_LINK", id)
	}
	return nil
}

// purlEscape percent-encodes a purl's version: Debian's "+" too.
func purlEscape(v string) string {
	return strings.ReplaceAll(url.PathEscape(v), "+", "%2B")
}

func purl(locator string) spdxRef {
	return spdxRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: locator}
}

// debianRelease is the purl distro of the packages: debian-VERSION_ID from base-files'
// os-release.
func debianRelease(debs []*Deb) string {
	for _, d := range debs {
		if e := d.Files.Get("/usr/lib/os-release"); d.Name == pkgBaseFiles && e != nil {
			for _, line := range strings.Split(string(e.Data), "\n") {
				if v, ok := strings.CutPrefix(line, "VERSION_ID="); ok {
					return "debian-" + strings.Trim(v, `"`)
				}
			}
		}
	}
	return "debian"
}

// SBOMPackages lists the name@version of every package an SBOM names, sorted: what a
// test or a person compares.
func SBOMPackages(doc []byte) ([]string, error) {
	var d spdxDocument
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range d.Packages {
		out = append(out, p.Name+"@"+p.VersionInfo)
	}
	slices.Sort(out)
	return out, nil
}
