package tokenizer

// kimiUnicode16 lists, in order, the characters whose class under Kimi-K2's
// pattern differs between Go's Unicode tables (15.0) and the Unicode 16.0
// tables of tiktoken's regex engine: the characters Unicode 15.1 and 16.0
// assigned (CJK Extension I; Garay, Gurung Khema, Kirat Rai, Ol Onal,
// Sunuwar, Todhri, Tulu-Tigalari; Egyptian hieroglyphs, Cyrillic and Latin
// additions, digits). TestKimiClassesMatchTiktoken checks every code point
// against the classes read off tiktoken (testdata/kimi-k2/classes.json).
var kimiUnicode16 = []struct {
	lo, hi rune
	c      kimiClass
}{
	{0x0897, 0x0897, kimiClsMark},
	{0x1C89, 0x1C89, kimiClsUpper},
	{0x1C8A, 0x1C8A, kimiClsLower},
	{0xA7CB, 0xA7CC, kimiClsUpper},
	{0xA7CD, 0xA7CD, kimiClsLower},
	{0xA7DA, 0xA7DA, kimiClsUpper},
	{0xA7DB, 0xA7DB, kimiClsLower},
	{0xA7DC, 0xA7DC, kimiClsUpper},
	{0x105C0, 0x105F3, kimiClsLetter},
	{0x10D40, 0x10D49, kimiClsNumber},
	{0x10D4A, 0x10D4F, kimiClsLetter},
	{0x10D50, 0x10D65, kimiClsUpper},
	{0x10D69, 0x10D6D, kimiClsMark},
	{0x10D6F, 0x10D6F, kimiClsLetter},
	{0x10D70, 0x10D85, kimiClsLower},
	{0x10EC2, 0x10EC4, kimiClsLetter},
	{0x10EFC, 0x10EFC, kimiClsMark},
	{0x11380, 0x11389, kimiClsLetter},
	{0x1138B, 0x1138B, kimiClsLetter},
	{0x1138E, 0x1138E, kimiClsLetter},
	{0x11390, 0x113B5, kimiClsLetter},
	{0x113B7, 0x113B7, kimiClsLetter},
	{0x113B8, 0x113C0, kimiClsMark},
	{0x113C2, 0x113C2, kimiClsMark},
	{0x113C5, 0x113C5, kimiClsMark},
	{0x113C7, 0x113CA, kimiClsMark},
	{0x113CC, 0x113D0, kimiClsMark},
	{0x113D1, 0x113D1, kimiClsLetter},
	{0x113D2, 0x113D2, kimiClsMark},
	{0x113D3, 0x113D3, kimiClsLetter},
	{0x113E1, 0x113E2, kimiClsMark},
	{0x116D0, 0x116E3, kimiClsNumber},
	{0x11BC0, 0x11BE0, kimiClsLetter},
	{0x11BF0, 0x11BF9, kimiClsNumber},
	{0x11F5A, 0x11F5A, kimiClsMark},
	{0x13460, 0x143FA, kimiClsLetter},
	{0x16100, 0x1611D, kimiClsLetter},
	{0x1611E, 0x1612F, kimiClsMark},
	{0x16130, 0x16139, kimiClsNumber},
	{0x16D40, 0x16D6C, kimiClsLetter},
	{0x16D70, 0x16D79, kimiClsNumber},
	{0x18CFF, 0x18CFF, kimiClsLetter},
	{0x1CCF0, 0x1CCF9, kimiClsNumber},
	{0x1E5D0, 0x1E5ED, kimiClsLetter},
	{0x1E5EE, 0x1E5EF, kimiClsMark},
	{0x1E5F0, 0x1E5F0, kimiClsLetter},
	{0x1E5F1, 0x1E5FA, kimiClsNumber},
	{0x2EBF0, 0x2EE5D, kimiClsHan},
}
